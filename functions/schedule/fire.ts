import { FlowSubmission } from "../../shared/flow/index.js";
import type { FlowStatus, Schedule, ScheduleRun, TemplateRef, TemplateStart } from "../../shared/model/index.js";
import { toProblem } from "../core/errors.js";
import type { Problem } from "../core/problem.js";
import type { FlowCall } from "../service/call.js";
import { submitFlow } from "../service/flows.js";
import { startTemplate } from "../service/templates.js";
import { cancelFlow } from "../service/recovery.js";
import { seconds, type Fire, type Memory } from "./memory.js";

/*
 * What one fire does (docs/schedules.md): look at the flows the schedule started before, apply
 * the overlap policy, and start the template as a new flow through the same submission service
 * the API uses, as the schedule's creator, with an Idempotency-Key made of the schedule and the
 * fire time. However often a fire is acted on (an alarm retried, the sweep poking while the
 * alarm rings, an isolate lost after the flow was created), it creates and starts one flow.
 */

/** Storage or an object could not be reached: the fire stays pending and is acted on again. */
export class TransientFailure extends Error {
  override name = "TransientFailure";
}

/** The schedule's creator may no longer start flows in the context: the schedule must pause. */
export class PermissionLost extends Error {
  override name = "PermissionLost";
}

/** What acting on a fire needs: the schedule, the object's memory (changed in place), and a call as the creator. */
export interface FireContext {
  record: Schedule;
  memory: Memory;
  call: FlowCall;
}

/** The Idempotency-Key of a fire's flow: the same for every repetition of that fire. */
export function fireKey(scheduleId: number, fireMs: number): string {
  return `schedule:${scheduleId}:${fireMs}`;
}

/** A failure as the run records it; throws for those that are not the fire's own fault. */
function classify(error: unknown, what: string): Problem {
  const problem = toProblem(error);
  if (problem.kind === "forbidden") throw new PermissionLost(`${what}: ${problem.detail ?? problem.title}`);
  // Storage away (5xx), or told to come back later (429: the context's flow-start throttle):
  // the fire waits, and is tried again.
  if (problem.status >= 500 || problem.status === 429)
    throw new TransientFailure(`${what}: ${problem.detail ?? problem.title}`);
  return problem;
}

/** The flows this schedule started that still run (one Redis round trip); the memory forgets the others. */
export async function stillRunning(c: FireContext): Promise<number[]> {
  if (c.memory.running.length === 0) return [];
  let statuses;
  try {
    statuses = await c.call.store.schedules.flowStatuses(c.record.context_id, c.memory.running);
  } catch (error) {
    throw new TransientFailure(`reading the running flows: ${(error as Error).message}`);
  }
  c.memory.running = c.memory.running.filter((_, i) => flowRuns(statuses[i]));
  return c.memory.running;
}

/** Whether a flow of this status (null: gone) still runs, for the overlap policies. */
export function flowRuns(status: FlowStatus | null | undefined): boolean {
  // A flow that unwinds (compensating) still runs: its compensations do.
  return status === "dispatched" || status === "started" || status === "compensating";
}

const flows = (ids: number[]) => `flow${ids.length === 1 ? "" : "s"} ${ids.join(", ")}`;

/** A run of `fire`, decided now. */
function runOf(fire: Fire, outcome: ScheduleRun["outcome"], extra: { flow_id?: number; reason?: string } = {}) {
  return { fire_at: seconds(fire.at), trigger: fire.trigger, outcome, ...extra, at: seconds(Date.now()) };
}

/**
 * Acts on one fire by the overlap policy and answers its run. Throws TransientFailure (act on it
 * again later) or PermissionLost (pause the schedule); any other failure is the run's `failed`.
 */
export async function actOn(fire: Fire, c: FireContext): Promise<ScheduleRun> {
  // allow_all starts whatever runs, so it neither reads nor keeps the running flows (their
  // number would grow without bound, and each fire would read them all).
  const looks = fire.trigger !== "buffered" && c.record.overlap !== "allow_all";
  const running = looks ? await stillRunning(c) : [];
  if (running.length > 0) {
    switch (c.record.overlap) {
      case "skip":
        return runOf(fire, "skipped", { reason: `${flows(running)} still running (overlap skip)` });
      case "buffer_one":
        if (c.memory.buffered && c.memory.buffered.at !== fire.at) {
          return runOf(fire, "skipped", {
            reason: `the fire of ${new Date(c.memory.buffered.at).toISOString()} already waits (overlap buffer_one)`,
          });
        }
        c.memory.buffered = fire;
        return runOf(fire, "buffered", { reason: `waits for ${flows(running)} to end (overlap buffer_one)` });
      case "cancel_other": {
        const refused = await cancelRunning(c, running, fire);
        if (refused) return runOf(fire, "failed", { reason: refused });
        return start(fire, c, "cancelled_other", `cancelled ${flows(running)} (overlap cancel_other)`);
      }
      case "allow_all":
        break;
    }
  }
  return start(fire, c, "started");
}

/** Starts the buffered fire once nothing runs any more; undefined while something still runs. */
export async function startBuffered(c: FireContext): Promise<ScheduleRun | undefined> {
  const buffered = c.memory.buffered;
  if (!buffered || (await stillRunning(c)).length > 0) return undefined;
  const run = await start({ at: buffered.at, trigger: "buffered" }, c, "started", "the running flows ended");
  delete c.memory.buffered;
  return run;
}

/**
 * Cancels the running flows through the API's own cancel path, as the creator (with compensate:
 * a flow with compensations unwinds); answers why one could not be.
 */
async function cancelRunning(c: FireContext, running: number[], fire: Fire): Promise<string | undefined> {
  const reason = `cancelled by schedule ${c.record.id}: its fire of ${new Date(fire.at).toISOString()} starts a new run (overlap cancel_other)`;
  for (const flowId of running) {
    try {
      // A saga unwinds rather than being left half done; one that unwinds already is left to.
      await cancelFlow(c.call, c.record.context_id, flowId, reason, true);
    } catch (error) {
      // A flow that is gone, or that ended meanwhile (409, a fire run again included), has
      // nothing left to cancel; anything else is the fire's problem.
      const problem = classify(error, `cancelling flow ${flowId}`);
      if (problem.kind !== "not-found" && problem.kind !== "conflict")
        return `cancelling flow ${flowId}: ${problem.detail ?? problem.title}`;
    }
  }
  c.memory.running = c.memory.running.filter((id) => !running.includes(id));
  return undefined;
}

/** What a fire asks of a stored template: the version named (else the latest then), the inputs, a started flow. */
function startOf(ref: TemplateRef): TemplateStart {
  return { ...(ref.version !== undefined ? { version: ref.version } : {}), inputs: ref.inputs, start: true };
}

/**
 * Creates and starts the template's flow for `fire` (idempotent by schedule and fire time): the
 * schedule's own flow, or a stored template's (its version, else the latest at the fire).
 */
async function start(
  fire: Fire,
  c: FireContext,
  outcome: "started" | "cancelled_other",
  reason?: string,
): Promise<ScheduleRun> {
  let flowId: number;
  const { context_id: contextId, from_template: ref } = c.record;
  const key = fireKey(c.record.id, fire.at);
  try {
    const { id } = c.record;
    const { view } = ref
      ? await startTemplate(c.call, contextId, ref.name, startOf(ref), key, undefined, "from_template", undefined, id)
      : await submitFlow(
          c.call,
          contextId,
          FlowSubmission.parse({ ...c.record.template, start: true }),
          key,
          undefined,
          undefined,
          id,
        );
    flowId = view.id;
  } catch (error) {
    const problem = classify(error, "starting the flow");
    return runOf(fire, "failed", { reason: `${problem.title}: ${problem.detail ?? ""}`.trim() });
  }
  if (c.record.overlap !== "allow_all" && !c.memory.running.includes(flowId)) c.memory.running.push(flowId);
  return runOf(fire, outcome, { flow_id: flowId, ...(reason ? { reason } : {}) });
}
