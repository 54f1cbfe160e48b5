import { z } from "zod";
import { FlowJobInput, messagesNeeded, resolveDag, MessageTimeouts } from "../../shared/flow/index.js";
import type { FlowView, JobView, Message, RunnerJob } from "../../shared/model/index.js";
import { messageEnd } from "../../shared/store/index.js";
import type { FlowCoordinatorRpc } from "../core/contracts.js";
import { Problem, unwrap, type RpcResult } from "../core/problem.js";
import type { FlowScope } from "../core/scopes.js";
import { coordinatorStub } from "../core/stubs.js";
import { contextFor, requireActor } from "./access.js";
import { callScope, type FlowCall } from "./call.js";
import { checkPinnedRunners, createInObject, dagProblem } from "./submission.js";

/** `POST /v1/contexts/{id}/jobs`: one job run outside any flow. */
export const JobSubmission = z
  .object({
    job: FlowJobInput,
    start: z.boolean().default(false),
    timeouts: MessageTimeouts.default({}),
  })
  .strict();
export type JobSubmission = z.output<typeof JobSubmission>;

/** A job record with its live status, attempt and runner. */
export type JobWithStatus = RunnerJob & { live?: JobView };

/** Creates (and maybe starts) a job outside any flow (admins). It runs as a flow of one. */
export async function submitJob(
  call: FlowCall,
  contextId: number,
  input: JobSubmission,
): Promise<{ job: JobWithStatus; view: FlowView }> {
  const callerId = requireActor(call);
  await contextFor(call, contextId, "admin");
  if (input.job.depends.length > 0) {
    throw dagProblem([
      { field: "job.depends", message: "a job outside a flow cannot depend on other jobs; submit a flow" },
    ]);
  }
  // An event finds a wait through its flow; a job outside any flow has none (submit a flow of one).
  const noRunner = (["wait", "sleep", "sleep_until", "flow"] as const).find((field) => input.job[field] !== undefined);
  if (noRunner) {
    throw dagProblem([
      {
        field: `job.${noRunner}`,
        message: "a job outside a flow runs a script; a wait, a sleep or a child flow is a job of a flow",
      },
    ]);
  }
  if (input.job.compensate) {
    throw dagProblem([
      {
        field: "job.compensate",
        message: "a job outside a flow has nothing to unwind: compensate is for a flow's jobs",
      },
    ]);
  }
  await checkPinnedRunners(call, contextId, [input.job], () => "job");
  const reservation = await call.store.flows.reserve({
    contextId,
    callerId,
    flowId: 0,
    jobsToAllocate: input.job.id === undefined ? 1 : 0,
    highestChosenJobId: input.job.id ?? 0,
    messages: messagesNeeded([input.job]),
  });
  // Neither an Idempotency-Key nor a nonce goes with a job submission's reservation.
  if (!("flowId" in reservation)) throw new Error("a job submission's reservation found an earlier one");
  const resolved = resolveDag([input.job], () => reservation.firstJobId);
  if ("issues" in resolved) throw dagProblem(resolved.issues);
  const job = resolved.jobs[0] as (typeof resolved.jobs)[number];
  const view = await createInObject(call, callScope(call, contextId, { callerId, jobId: job.id }), {
    callerId,
    jobs: [job],
    envVars: {},
    timeouts: input.timeouts,
    messageBase: reservation.firstMessageId,
    chosen: input.job.id !== undefined ? [0] : [],
    start: input.start,
  });
  return { job: await loadJob(call, contextId, callerId, job.id), view };
}

/** The live view of one job, from the Durable Object that runs it. */
async function liveJob(call: FlowCall, record: RunnerJob): Promise<JobView | undefined> {
  const scope = callScope(
    call,
    record.context_id,
    record.flow_id === 0 ? { callerId: record.caller_id, jobId: record.id } : { flowId: record.flow_id },
  );
  const view = unwrap(await coordinatorStub(call.env, scope).view(scope));
  return view?.jobs.find((j) => j.id === record.id);
}

/**
 * A job's record whole: a map's instance keeps only its item and its map's id (flow-records.ts
 * says why), so what it runs (script, variables, prerequisites) is read from its map's record, as
 * the flow's object does (instanceSpecOf). One read more, for an instance only.
 */
async function wholeRecord(call: FlowCall, record: RunnerJob): Promise<RunnerJob> {
  if (record.map_of === undefined) return record;
  const map = await call.store.jobs.find({
    context_id: record.context_id,
    caller_id: record.caller_id,
    id: record.map_of,
  });
  if (!map) return record;
  return {
    ...record,
    script: map.script,
    env_vars: { ...map.env_vars, ...record.env_vars },
    prerequisites: map.prerequisites,
  };
}

/** Loads a job with its live status (readers). */
export async function loadJob(call: FlowCall, contextId: number, callerId: number, id: number): Promise<JobWithStatus> {
  await contextFor(call, contextId, "read");
  const record = await wholeRecord(
    call,
    await call.store.jobs.load({ context_id: contextId, caller_id: callerId, id }),
  );
  const live = await liveJob(call, record);
  if (!live) return record;
  // The record was read first: a job that ended between the two reads has the live status of
  // its end and the record's error of before it (none). The error goes with the status it
  // explains, so both are the live view's (CI saw a job "error" with no error).
  const { error: _before, ...rest } = record;
  return {
    ...rest,
    status: live.status,
    ...(live.attempt > 0 ? { attempt: live.attempt } : {}),
    ...(live.error !== undefined ? { error: live.error } : {}),
    live,
  };
}

/** Starts a job outside any flow (admins); starting it twice changes nothing. */
export function startJob(call: FlowCall, contextId: number, callerId: number, id: number): Promise<JobWithStatus> {
  return loneJobCommand(call, contextId, callerId, id, "start", (stub, scope) => stub.start(scope));
}

/**
 * Cancels a job outside any flow (admins), as a flow is cancelled: it errors as cancelled and its
 * runner, if it holds an attempt, is told to stop. A job that already ended is refused (409 naming
 * its status) and nothing changes; so is a cancel retried after it succeeded.
 */
export function cancelJob(
  call: FlowCall,
  contextId: number,
  callerId: number,
  id: number,
  reason: string,
): Promise<JobWithStatus> {
  return loneJobCommand(call, contextId, callerId, id, "cancel", (stub, scope) => stub.cancel(scope, reason));
}

/** Runs a failed job outside any flow again with fresh retries (admins); any other status is a 409 naming it. */
export function rerunJob(call: FlowCall, contextId: number, callerId: number, id: number): Promise<JobWithStatus> {
  return loneJobCommand(call, contextId, callerId, id, "rerun", (stub, scope) => stub.rerun(scope));
}

/**
 * Runs an admin's command on the Durable Object of a job outside any flow (the one a flow's
 * command runs on, so the same machine decides), then answers the job with its live status. A
 * job of a flow is refused: its flow is what starts, cancels and re-runs.
 */
async function loneJobCommand(
  call: FlowCall,
  contextId: number,
  callerId: number,
  id: number,
  verb: "start" | "cancel" | "rerun",
  command: (stub: DurableObjectStub<FlowCoordinatorRpc>, scope: FlowScope) => Promise<RpcResult<FlowView>>,
): Promise<JobWithStatus> {
  await contextFor(call, contextId, "admin");
  const record = await call.store.jobs.load({ context_id: contextId, caller_id: callerId, id });
  if (record.flow_id !== 0) {
    throw new Problem("conflict", `job ${id} belongs to flow ${record.flow_id}: ${verb} the flow`);
  }
  const scope = callScope(call, contextId, { callerId, jobId: id });
  unwrap(await command(coordinatorStub(call.env, scope), scope));
  return loadJob(call, contextId, callerId, id);
}

/**
 * Loads a message (readers). A job message's stored status moves at dispatch, and at the end
 * only for a failed attempt that is retried: the last attempt takes its end from the job's
 * record. In between, whether the runner acknowledged it comes from the job's live state.
 */
export async function loadMessage(call: FlowCall, contextId: number, callerId: number, id: number): Promise<Message> {
  await contextFor(call, contextId, "read");
  const stored = await call.store.messages.load({ context_id: contextId, caller_id: callerId, id });
  const job = stored.job[0] && (await wholeRecord(call, stored.job[0]));
  const message = job ? { ...stored, job: [job] } : stored;
  if (message.message_type !== "job" || !job || message.status !== "dispatched") return message;
  const record = await call.store.jobs.find({ context_id: contextId, caller_id: job.caller_id, id: job.id });
  const ended = record && messageEnd(message, record);
  if (ended) return ended;
  const live = await liveJob(call, job);
  const current = live && live.attempt === message.attempt;
  if (current && (live.delivery === "acknowledged" || live.status === "started"))
    return {
      ...message,
      status: "acknowledged",
      ...(live.runner_id !== undefined ? { runner_id: live.runner_id } : {}),
    };
  return message;
}
