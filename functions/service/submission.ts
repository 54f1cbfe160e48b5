import { randomHex } from "../../shared/auth/index.js";
import { MESSAGE_TIMEOUTS, type DagIssue, type FlowTimeouts } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import type { CreateFlowInput } from "../core/contracts.js";
import { fieldProblem } from "../core/errors.js";
import type { Problem } from "../core/problem.js";
import { unwrap } from "../core/problem.js";
import type { FlowScope } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import type { FlowCall } from "./call.js";
import { callerHasHttps } from "./caller-addresses.js";

/*
 * What submitting a flow and submitting a job outside any flow share: the checks of the jobs,
 * the timeouts they run with, the trace they belong to, and the hand-over to the Durable Object
 * that stores and runs them.
 */

/** A digest of a request as parsed, to tell a retry from another request under the same Idempotency-Key. */
export async function requestDigest(request: unknown): Promise<string> {
  const bytes = new Uint8Array(
    await crypto.subtle.digest("SHA-256", new TextEncoder().encode(JSON.stringify(request))),
  );
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** A 400 naming every DAG issue (the first as `field`). */
export function dagProblem(issues: DagIssue[]): Problem {
  return fieldProblem(issues.map((i) => ({ field: `body.${i.field}`, message: i.message })));
}

/**
 * 400 when a job (or its compensation) pins a runner that is not registered in the context;
 * `where` names job i in the body.
 */
export async function checkPinnedRunners(
  call: FlowCall,
  contextId: number,
  jobs: { runner_id?: number | undefined; compensate?: { runner_id?: number | undefined } | undefined }[],
  where: (i: number) => string = (i) => `jobs.${i}`,
): Promise<void> {
  const pinned = jobs.flatMap((job, i) => [
    ...(job.runner_id !== undefined ? [{ field: `${where(i)}.runner_id`, id: job.runner_id }] : []),
    ...(job.compensate?.runner_id !== undefined
      ? [{ field: `${where(i)}.compensate.runner_id`, id: job.compensate.runner_id }]
      : []),
  ]);
  if (pinned.length === 0) return;
  const runners = new Set((await call.store.runners.list({ context_id: contextId }, 0, 1000)).items.map((r) => r.id));
  const missing = pinned.filter((p) => !runners.has(p.id));
  if (missing.length > 0) {
    throw dagProblem(
      missing.map((m) => ({
        field: m.field,
        message: `runner ${m.id} is not registered in context ${contextId}`,
      })),
    );
  }
}

/**
 * 400 when a child-flow job names a template (or a version of it) its context does not keep: told
 * at submission rather than as the job's failure later. One read per template named. The version
 * a job does not pin is the latest when the job starts (docs/flows.md, "Child flows").
 */
export async function checkChildTemplates(
  call: FlowCall,
  contextId: number,
  jobs: { flow?: { template: string; version?: number | undefined } | undefined }[],
): Promise<void> {
  const named = [...new Set(jobs.flatMap((job) => (job.flow ? [job.flow.template] : [])))];
  if (named.length === 0) return;
  const views = new Map(
    await Promise.all(named.map(async (name) => [name, await call.store.templates.view(contextId, name)] as const)),
  );
  const issues = jobs.flatMap((job, i) => {
    if (!job.flow) return [];
    const view = views.get(job.flow.template);
    const version = job.flow.version;
    if (!view)
      return [
        {
          field: `jobs.${i}.flow.template`,
          message: `template ${job.flow.template} does not exist in context ${contextId}`,
        },
      ];
    if (version !== undefined && !view.versions.some((v) => v.version === version))
      return [
        {
          field: `jobs.${i}.flow.version`,
          message: `template ${job.flow.template} keeps versions ${view.oldest} to ${view.latest}, not ${version}`,
        },
      ];
    return [];
  });
  if (issues.length > 0) throw dagProblem(issues);
}

/** The timeouts a submission (a flow, or a job outside any flow) may ask for. */
export interface AskedTimeouts {
  timeout?: number | undefined;
  timeout_ack?: number | undefined;
  timeout_result?: number | undefined;
  retry_base_ms?: number | undefined;
  retry_cap_ms?: number | undefined;
  flow?: number | undefined;
}

/**
 * The timeouts of a submission: its own, else the message defaults, and for the retry backoff
 * the deployment's (RETRY_BASE_MS, RETRY_CAP_MS). `timeout_result` and the flow's own deadline
 * (`flow`, docs/flows.md) stay unset unless asked for.
 */
function flowTimeouts(call: FlowCall, asked: AskedTimeouts): FlowTimeouts {
  return {
    timeout: asked.timeout ?? MESSAGE_TIMEOUTS.timeout,
    timeout_ack: asked.timeout_ack ?? MESSAGE_TIMEOUTS.timeout_ack,
    ...(asked.timeout_result !== undefined ? { timeout_result: asked.timeout_result } : {}),
    retry_base_ms: asked.retry_base_ms ?? call.config.retryBaseMs,
    retry_cap_ms: asked.retry_cap_ms ?? call.config.retryCapMs,
    ...(asked.flow !== undefined ? { flow: asked.flow } : {}),
  };
}

/** A fresh W3C trace id, or the one of the request's `traceparent`. */
function traceId(request: Request): string {
  const parent = request.headers.get("traceparent");
  const match = parent ? /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(parent) : null;
  if (match?.[1] && !/^0+$/.test(match[1])) return match[1];
  return randomHex(16);
}

/** Has the Durable Object of `scope` store the resolved jobs (all or nothing) and maybe start them. */
export async function createInObject(
  call: FlowCall,
  scope: FlowScope,
  input: Omit<CreateFlowInput, "timeouts" | "traceId"> & { timeouts: AskedTimeouts },
): Promise<FlowView> {
  const create: CreateFlowInput = {
    ...input,
    timeouts: flowTimeouts(call, input.timeouts),
    traceId: traceId(call.request),
    // Known in this isolate in the common case (caller-addresses.ts): no storage read per flow.
    notifyHttps: input.notifyHttps ?? (await callerHasHttps(call, input.callerId)),
  };
  return unwrap(await coordinatorStub(call.env, scope).create(scope, create));
}
