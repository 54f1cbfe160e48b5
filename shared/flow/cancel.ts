import { compensations, FLOW_ENDED, isCompensation } from "./compensation.js";
import { ENDED, type Draft } from "./draft.js";
import { cancelChild, endFlow, markSkipped, unwind } from "./outcomes.js";

/**
 * Cancels the flow: nothing more is dispatched, every job not ended errors as cancelled, and
 * each attempt in flight is stopped at its runner. A flow that already failed can still have
 * attempts in flight: those are cancelled the same way. `why` is what the jobs and the flow say
 * (a cancel's reason, or that the flow ran past its deadline). With `compensate`, a flow that
 * has compensations unwinds rather than ending: they are left to run (those of the jobs that
 * finished); without, they are skipped. Cancelling a flow that unwinds stops the unwinding: its
 * compensations not ended error as cancelled (a re-run runs them), and it ends
 * compensation_failed.
 */
export function cancel(
  d: Draft,
  reason: string,
  at: number,
  why = `cancelled: ${reason}`,
  compensate = false,
): boolean {
  const running = !FLOW_ENDED.has(d.flow.status);
  const unwinding = d.flow.status === "compensating";
  const unwinds = running && !unwinding && compensate && compensations(d.flow).length > 0;
  let changed = running;
  if (running && !unwinding) d.flow.error = { job: 0, reason: why };
  for (const id of d.flow.order) {
    const job = d.job(id);
    if (ENDED.has(job.status)) continue;
    changed = true;
    if (running && !unwinding && isCompensation(job)) {
      if (!unwinds) markSkipped(d, id, "not run: the flow was cancelled without compensate", at);
      continue;
    }
    if (job.delivery)
      d.effects.push({ type: "cancelJob", job: id, attempt: job.attempt, runner: job.delivery.runnerId, reason });
    if (job.deadline?.kind === "child") d.effects.push(cancelChild(job, why));
    d.update(id, { status: "error", error: why, deadline: undefined, endedAt: at });
    d.effects.push({ type: "jobEnded", job: id });
  }
  if (unwinds) unwind(d, at);
  else if (running) {
    if (!unwinding) d.flow.status = "error";
    endFlow(d, at);
  }
  return changed;
}
