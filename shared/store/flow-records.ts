import {
  itemVars,
  jobKey,
  messageId,
  resultMessageId,
  MESSAGE_TIMEOUTS,
  type FlowState,
  type JobState,
} from "../flow/index.js";
import { progressCount, type Flow, type FlowProgress, type Message, type RunnerJob } from "../model/index.js";

/**
 * The stored records of a flow, built from the machine's state: what `createFlow` writes and
 * what a dispatch puts in a message. Times in records are epoch seconds (the model's unit); the
 * machine's are milliseconds.
 */

const seconds = (ms: number) => Math.floor(ms / 1000);

/** How many of the flow's jobs are in each status (what its record keeps once it ended). */
export function flowProgress(state: FlowState): FlowProgress {
  return progressCount(state.order.map((id) => state.jobs.job(id).status));
}

/** What a flow's end writes to its record: its status, error, times and job counts. */
export function flowEndFields(state: FlowState, secs: number): Partial<Flow> {
  return { status: state.status, error: state.error, ended_at: secs, updated_at: secs, progress: flowProgress(state) };
}

/** The flow record as created (status dispatched, no result yet). */
export function flowRecord(state: FlowState, now: number): Flow {
  return {
    id: state.id,
    caller_id: state.callerId,
    context_id: state.contextId,
    jobs: state.order,
    env_vars: state.envVars,
    created_at: seconds(now),
    updated_at: seconds(now),
    status: state.status,
    timeouts: state.timeouts,
    trace_id: state.traceId,
    ...(state.priority !== 0 ? { priority: state.priority } : {}),
    ...(state.maxParallel !== undefined ? { max_parallel: state.maxParallel } : {}),
    ...(state.template !== undefined ? { template: state.template } : {}),
    ...(state.parent !== undefined ? { parent: state.parent } : {}),
    ...state.identity,
  };
}

/**
 * A job's record as created. A map's instance keeps only its item (`env_vars` ITEM and
 * ITEM_INDEX) and its map's id, not the map's script, variables and prerequisites again: a map of
 * 1,000 items would write them 1,000 times in one call (a rebuild takes them from the map's
 * record, a delivery its script from the state).
 */
export function jobRecord(state: FlowState, job: JobState, now: number): RunnerJob {
  const instance = job.mapOf !== undefined;
  return {
    id: job.id,
    caller_id: state.callerId,
    context_id: state.contextId,
    flow_id: state.id,
    script: instance ? "" : job.spec.script,
    ...(job.spec.script_type !== undefined ? { script_type: job.spec.script_type } : {}),
    timeout: job.spec.timeout,
    retries: job.spec.retries,
    env_vars: instance ? itemVars(job.spec.env_vars) : job.spec.env_vars,
    result: job.result ?? {},
    prerequisites: instance ? [] : job.spec.prerequisites,
    depends: job.depends,
    ...kindFields(job),
    ...(job.spec.runner_id !== undefined ? { runner_id: job.spec.runner_id } : {}),
    ...(job.name !== undefined ? { name: job.name } : {}),
    ...growthFields(job),
    message_base: job.messageBase,
    ...(job.attempt > 0 ? { attempt: job.attempt } : {}),
    ...(job.error !== undefined ? { error: job.error } : {}),
    created_at: seconds(now),
    updated_at: seconds(now),
    status: job.status,
  };
}

/** What a job's record keeps of how it joined a running flow: a map's instance, a job a result added. */
function growthFields(job: JobState): Partial<RunnerJob> {
  return {
    ...(job.mapOf !== undefined ? { map_of: job.mapOf } : {}),
    ...(job.itemIndex !== undefined ? { item_index: job.itemIndex } : {}),
    ...(job.addedBy !== undefined ? { added_by: job.addedBy } : {}),
  };
}

/** What a job's record keeps of its kind (wait, sleep, map, the job a compensation undoes) and its rules, when it has them. */
function kindFields(job: JobState): Partial<RunnerJob> {
  const { wait, map, sleep, sleep_until, flow, when, needs, allow_failure, compensates } = job.spec;
  return {
    ...(compensates !== undefined ? { compensates } : {}),
    ...(wait ? { wait } : {}),
    ...(map ? { map } : {}),
    ...(sleep !== undefined ? { sleep } : {}),
    ...(sleep_until !== undefined ? { sleep_until } : {}),
    ...(flow !== undefined ? { flow } : {}),
    ...(when !== undefined ? { when } : {}),
    ...(needs !== undefined ? { needs } : {}),
    ...(allow_failure ? { allow_failure } : {}),
    ...(job.skipReason !== undefined ? { skip_reason: job.skipReason } : {}),
  };
}

/** The timeout_result a job's message carries: the flow's, or the job's timeout plus grace. */
function resultTimeout(state: FlowState, job: JobState): number {
  return state.timeouts.timeout_result ?? job.spec.timeout + MESSAGE_TIMEOUTS.resultGrace;
}

/**
 * The message that carries one attempt of a job to a runner, as stored: the embedded job holds
 * its own `env_vars` only. The environment it runs with (the flow's variables, the coordinator's,
 * its dependencies' results) is put into the delivery when it goes out (`jobEnvironment`),
 * so neither the flow's variables nor a result is copied into storage per attempt.
 */
export function dispatchMessage(state: FlowState, job: JobState, attempt: number, now: number): Message {
  const embedded: RunnerJob = { ...jobRecord(state, job, now), status: "dispatched", attempt };
  return {
    id: messageId(job, attempt),
    caller_id: state.callerId,
    context_id: state.contextId,
    message: `job ${jobKey(job)} of flow ${state.id}, attempt ${attempt}`,
    message_type: "job",
    message_format_type: "text",
    timeout: state.timeouts.timeout,
    timeout_ack: state.timeouts.timeout_ack,
    timeout_result: resultTimeout(state, job),
    job: [embedded],
    logs: [],
    created_at: seconds(now),
    updated_at: seconds(now),
    status: "dispatched",
    attempt,
    ...(job.previousRunner !== undefined ? { avoid_runner_id: job.previousRunner } : {}),
    trace_id: state.traceId,
  };
}

/**
 * The message that tells a flow's caller how it ended, for its inbox (and its https address): a
 * mail with a readable summary (how many jobs ended how, the failed job and why), and the flow's
 * status and error as `flow_result`. The results are not copied into it: they are kept once, in
 * the jobs' records, and put into `flow_result.result` whenever the message is read or POSTed
 * (`FlowStore.withResults`). It is written `acknowledged`, the status of a message in an inbox:
 * the commit that ends the flow puts it there itself (flow-plan.ts), and the relay, which may
 * still POST it, knows by that status not to put it there again (actor-delivery.ts).
 */
export function resultMessage(state: FlowState, now: number): Message {
  const standalone = state.id === 0;
  const subject = standalone ? `job ${state.order[0]} ${state.status}` : `flow ${state.id} ${state.status}`;
  const lines = [`${subject}: ${jobCounts(state)}`];
  if (state.error) lines.push(`failed job: ${state.error.name ?? state.error.job}: ${state.error.reason}`);
  const failed = state.error?.failed_compensations;
  if (failed) lines.push(`failed compensations: ${failed.join(", ")}`);
  lines.push(...skippedLines(state));
  return {
    id: resultMessageId(state),
    caller_id: state.callerId,
    context_id: state.contextId,
    message: lines.join("\n"),
    message_type: "mail",
    message_format_type: "text",
    timeout: state.timeouts.timeout,
    timeout_ack: state.timeouts.timeout_ack,
    timeout_result: state.timeouts.timeout_ack,
    job: [],
    logs: [],
    created_at: seconds(now),
    updated_at: seconds(now),
    status: "acknowledged",
    trace_id: state.traceId,
    to: state.callerId,
    subject,
    flow_result: {
      flow_id: state.id,
      ...(standalone ? { job_id: state.order[0] as number } : {}),
      status: state.status,
      ...(state.error ? { error: state.error } : {}),
      ...skippedOf(state),
    },
  };
}

/** The flow's skipped jobs by key, with why (nothing when none was). */
export function skippedOf(state: Pick<FlowState, "order" | "jobs">): { skipped?: Record<string, string> } {
  const skipped: Record<string, string> = {};
  let any = false;
  for (const id of state.order) {
    const job = state.jobs.job(id);
    if (job.status !== "skipped") continue;
    skipped[jobKey(job)] = job.skipReason ?? "";
    any = true;
  }
  return any ? { skipped } : {};
}

/** How many skipped jobs the mail's text names; `flow_result.skipped` (and the flow's view) has them all. */
export const MAIL_SKIPPED_SHOWN = 20;

/**
 * The mail's lines about skipped jobs: `skipped: <job>: <why>` for the first MAIL_SKIPPED_SHOWN
 * (a reason quotes at most 200 characters of a `when`, work.ts), then how many more, so the text
 * stays small whatever the flow's size.
 */
function skippedLines(state: Pick<FlowState, "order" | "jobs">): string[] {
  const reasons = Object.entries(skippedOf(state).skipped ?? {});
  const lines = reasons.slice(0, MAIL_SKIPPED_SHOWN).map(([key, why]) => `skipped: ${key}: ${why}`);
  const more = reasons.length - MAIL_SKIPPED_SHOWN;
  if (more > 0) lines.push(`skipped: ${more} more (flow_result.skipped and the flow's view list them all)`);
  return lines;
}

/** "3 jobs finished, 1 error": how a flow's jobs ended, in a few words. */
function jobCounts(state: FlowState): string {
  const counts = new Map<string, number>();
  for (const id of state.order) {
    const status = state.jobs.job(id).status;
    counts.set(status, (counts.get(status) ?? 0) + 1);
  }
  const parts = [...counts].map(([status, n], i) =>
    i === 0 ? `${n} job${n === 1 ? "" : "s"} ${status}` : `${n} ${status}`,
  );
  return parts.join(", ");
}

/**
 * A job attempt's message with its final status, end and runner taken from its job's record
 * when the message has no end of its own: the commit that ends a job writes only the job
 * (flow-plan.ts). Only the job's last attempt can take them, and only while the job holds them
 * (a re-run copies them into the message before the job forgets them). Null when the job's
 * record says nothing of this message's end.
 */
export function messageEnd(message: Message, job: RunnerJob): Message | null {
  if (message.message_type !== "job" || message.ended_at !== undefined) return null;
  if (job.ended_at === undefined || job.attempt !== message.attempt) return null;
  return {
    ...message,
    status: job.status === "finished" ? "processed" : "error",
    ended_at: job.ended_at,
    updated_at: job.ended_at,
    ...(job.last_runner_id !== undefined ? { runner_id: job.last_runner_id } : {}),
  };
}
