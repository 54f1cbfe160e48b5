import { isCompensation } from "./compensation.js";
import { ENDED, timings, type Draft } from "./draft.js";
import type { FlowEffect } from "./events.js";
import { runsAfterFailure } from "./rules.js";
import { jobKey, type JobState } from "./state.js";

/** What a job that fails its flow stops (outcomes.ts calls it from `fail`). */

/**
 * A job failed the flow: nothing more starts but its clean-up jobs (`needs: all_done`) and,
 * once those ended, its compensations (which wait for the flow to unwind). What
 * depended on the failed job can never run (said on each); every other job still waiting, a job
 * waiting out a retry's backoff, a wait, a sleep, a child flow (cancelled), a map waiting to
 * expand: each ends in error, saying why. Attempts in
 * flight run on. Returns the jobs it ended, whose dependents (clean-ups) are then decided.
 */
export function stopForFailure(d: Draft, failed: JobState, at: number): number[] {
  const ended: number[] = [];
  const end = (id: number, error: string) => {
    d.update(id, { status: "error", error, deadline: undefined, ...timings(d.job(id), at) });
    d.effects.push({ type: "jobEnded", job: id });
    ended.push(id);
  };
  const pending = [...failed.dependents];
  while (pending.length > 0) {
    const next = d.job(pending.pop() as number);
    if (next.status !== "waiting_for_prerequisites" || runsAfterFailure(next)) continue;
    end(next.id, `not run: dependency ${jobKey(failed)} failed`);
    pending.push(...next.dependents);
  }
  for (const id of d.flow.order) {
    const job = d.job(id);
    if (ENDED.has(job.status) || runsAfterFailure(job) || isCompensation(job)) continue;
    if (job.status === "waiting_for_prerequisites") end(id, `not run: the flow failed (job ${jobKey(failed)})`);
    else if (job.deadline?.kind === "retry")
      end(id, job.error ?? `not retried: the flow failed (job ${jobKey(failed)})`);
    else if (
      job.deadline?.kind === "wait" ||
      job.deadline?.kind === "sleep" ||
      job.deadline?.kind === "child" ||
      job.deadline?.kind === "expand"
    ) {
      // A child flow's result can no longer matter: it is cancelled, not left to run on.
      const why = `stopped: the flow failed (job ${jobKey(failed)})`;
      if (job.deadline.kind === "child") d.effects.push(cancelChild(job, why));
      end(id, why);
    }
  }
  return ended;
}

/** The effect that cancels a running child-flow job's child (known or still being started). */
export function cancelChild(job: JobState, reason: string): FlowEffect {
  return {
    type: "cancelChild",
    job: job.id,
    attempt: job.attempt,
    reason,
    ...(job.child !== undefined ? { child: job.child } : {}),
  };
}
