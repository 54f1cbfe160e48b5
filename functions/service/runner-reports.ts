import type { ProblemDocument } from "../../shared/client/index.js";
import { z } from "zod";
import { Id } from "../../shared/model/index.js";
import type { EventAnswer, ReportedEvent } from "../core/contracts.js";
import { toProblem } from "../core/errors.js";
import { Problem, unwrap, type RpcResult } from "../core/problem.js";
import type { FlowScope, RunnerEventName } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import type { FlowCall } from "./call.js";
import { reportAnswer, reportedEvent, RunnerEventBodies, type ReportNonce, type WebhookPath } from "./runner-events.js";

/** Reports one signed request may carry. */
export const MAX_REPORTS = 100;

/**
 * Durable Objects (flows, or jobs outside any flow) a batch calls at once. Each gets all its
 * reports in one call, and its group commit writes what arrives together in one step. Bounded,
 * so one request never fans out past this.
 */
const PARALLEL_OBJECTS = 16;

/**
 * Events whose repetition changes nothing: a second ack, start or result of the same attempt is
 * answered `duplicate` by the flow's state machine (a result of an old attempt `stale`), whoever
 * sends it. A replayed heartbeat or log report would renew the attempt's lease (and append the
 * lines again), so those are checked against the signature's nonce.
 */
const IDEMPOTENT: ReadonlySet<RunnerEventName> = new Set(["ack", "started", "result"]);

const target = {
  /** The job's flow; for a job outside any flow, `caller_id` instead. */
  flow_id: Id.optional(),
  caller_id: Id.optional(),
  job_id: Id,
};

function entry<N extends RunnerEventName>(name: N) {
  return z.object({ ...target, event: z.literal(name), body: RunnerEventBodies[name] }).strict();
}

/** One report of a batch: which job, which webhook, and that webhook's body. */
export const RunnerReport = z
  .discriminatedUnion("event", [entry("ack"), entry("started"), entry("heartbeat"), entry("result"), entry("logs")])
  .refine((r) => (r.flow_id === undefined) !== (r.caller_id === undefined), {
    message: "give flow_id (a job in a flow) or caller_id (a job outside any flow), exactly one",
    path: ["flow_id"],
  });
export type RunnerReport = z.output<typeof RunnerReport>;

/** The body of a batch of reports. */
export const RunnerReports = z.object({ reports: z.array(RunnerReport).min(1).max(MAX_REPORTS) }).strict();

/** How one report of a batch was taken: as its webhook would answer, or the problem it would answer with. */
export type ReportAnswer =
  { outcome: "applied" | "duplicate"; status?: string; reason?: string } | { problem: ProblemDocument };

function pathOf(contextId: number, r: RunnerReport): WebhookPath {
  return r.flow_id !== undefined
    ? { contextId, flowId: r.flow_id, jobId: r.job_id }
    : { contextId, callerId: r.caller_id as number, jobId: r.job_id };
}

/**
 * Applies a runner's batch of reports, each as its own webhook would be (the same event to the
 * job's Durable Object, the same answer), and answers each in order; one refused report (an old
 * attempt, an unknown job) does not stop the others. Each object gets its reports in one call
 * (`handleMany`), which applies one job's reports in their order and different jobs' together;
 * up to PARALLEL_OBJECTS objects at once.
 *
 * Replays: the request's nonce is not claimed in Redis. Acks, starts and results are idempotent
 * by themselves (see IDEMPOTENT); a heartbeat or log report carries the nonce with its position
 * (`<nonce> #<i>`) to its job's Durable Object, which refuses it if that pair was seen, as it does
 * for a single webhook. The signature covers the body, so a replay has the same entries at the
 * same positions and is refused there.
 */
export async function reportRunnerEvents(
  call: FlowCall,
  contextId: number,
  runnerId: number,
  reports: RunnerReport[],
  nonce: ReportNonce,
): Promise<ReportAnswer[]> {
  const p = call.principal;
  if (p.kind !== "runner" || p.contextId !== contextId || p.id !== runnerId) {
    throw new Problem("forbidden", `only runner ${runnerId} of context ${contextId} reports through this path`, {
      needed: ["runner"],
    });
  }
  // The reports of each object, in their order.
  const objects = new Map<string, { scope: FlowScope; reported: ReportedEvent[]; at: number[] }>();
  const answers: ReportAnswer[] = [];
  reports.forEach((r, i) => {
    // A heartbeat or log report is checked against the request's nonce and its position.
    const own = IDEMPOTENT.has(r.event) ? undefined : { ...nonce, value: `${nonce.value} #${i}` };
    try {
      const { scope, reported } = reportedEvent(call, pathOf(contextId, r), r.event, r.body, own);
      const key = r.flow_id !== undefined ? `${r.flow_id}` : `c${r.caller_id}/${r.job_id}`;
      const object = objects.get(key) ?? { scope, reported: [], at: [] };
      object.reported.push(reported);
      object.at.push(i);
      objects.set(key, object);
    } catch (error) {
      answers[i] = problemOf(error, i, r);
    }
  });
  const apply = async (object: { scope: FlowScope; reported: ReportedEvent[]; at: number[] }) => {
    let results: RpcResult<EventAnswer>[];
    try {
      // The stub's types cannot map an RpcResult nested in another (they make the method's answer
      // `never`); what comes back is what handleMany declares.
      const answered = coordinatorStub(call.env, object.scope).handleMany(object.scope, object.reported) as unknown;
      results = unwrap(await (answered as Promise<RpcResult<RpcResult<EventAnswer>[]>>));
    } catch (error) {
      for (const i of object.at) answers[i] = problemOf(error, i, reports[i] as RunnerReport);
      return;
    }
    object.at.forEach((i, k) => {
      try {
        const a = reportAnswer(unwrap(results[k] as RpcResult<EventAnswer>));
        answers[i] = {
          outcome: a.outcome as "applied" | "duplicate",
          ...(a.status ? { status: a.status } : {}),
          ...(a.reason ? { reason: a.reason } : {}),
        };
      } catch (error) {
        answers[i] = problemOf(error, i, reports[i] as RunnerReport);
      }
    });
  };
  const queue = [...objects.values()];
  const lane = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) await apply(next);
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_OBJECTS, queue.length) }, lane));
  return answers;
}

/** A report's failure as its answer (logged when it is the coordinator's). */
function problemOf(error: unknown, i: number, r: RunnerReport): ReportAnswer {
  const problem = toProblem(error);
  if (problem.status >= 500) console.warn(`report ${i} (${r.event} of job ${r.job_id}): ${problem.message}`);
  return { problem: problem.toJSON() as unknown as ProblemDocument };
}
