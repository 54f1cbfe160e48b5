import type { ProblemDocument } from "../../shared/client/index.js";
import { z } from "zod";
import { Id } from "../../shared/model/index.js";
import { toProblem } from "../core/errors.js";
import { Problem } from "../core/problem.js";
import type { RunnerEventName } from "../core/scopes.js";
import type { FlowCall } from "./call.js";
import { reportRunnerEvent, RunnerEventBodies, type ReportNonce, type WebhookPath } from "./runner-events.js";

/** Reports one signed request may carry. */
export const MAX_REPORTS = 100;

/**
 * Jobs whose reports are applied at once. The reports of different jobs of one flow meet in that
 * flow's Durable Object, whose group commit writes what arrives together in one step; jobs of
 * different flows go to different objects. Bounded, so one request never fans out past this.
 */
const PARALLEL_JOBS = 16;

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
 * Applies a runner's batch of reports, each through the path its own webhook takes
 * (reportRunnerEvent → the job's Durable Object), and answers each in order; one refused report
 * (an old attempt, an unknown job) does not stop the others. Reports on one job are applied in
 * their order, one after another; different jobs at once, up to PARALLEL_JOBS.
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
  const jobs = new Map<string, number[]>();
  reports.forEach((r, i) => {
    const key = r.flow_id !== undefined ? `${r.flow_id}/${r.job_id}` : `c${r.caller_id}/${r.job_id}`;
    const list = jobs.get(key);
    if (list) list.push(i);
    else jobs.set(key, [i]);
  });
  const answers: ReportAnswer[] = [];
  const apply = async (i: number): Promise<ReportAnswer> => {
    const r = reports[i] as RunnerReport;
    const own = IDEMPOTENT.has(r.event) ? undefined : { ...nonce, value: `${nonce.value} #${i}` };
    try {
      const a = await reportRunnerEvent(call, pathOf(contextId, r), r.event, r.body, own);
      return {
        outcome: a.outcome as "applied" | "duplicate",
        ...(a.status ? { status: a.status } : {}),
        ...(a.reason ? { reason: a.reason } : {}),
      };
    } catch (error) {
      const problem = toProblem(error);
      if (problem.status >= 500) console.warn(`report ${i} (${r.event} of job ${r.job_id}): ${problem.message}`);
      return { problem: problem.toJSON() as unknown as ProblemDocument };
    }
  };
  const queue = [...jobs.values()];
  const lane = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      for (const i of next) answers[i] = await apply(i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(PARALLEL_JOBS, queue.length) }, lane));
  return answers;
}
