/**
 * The steps of a lone job, told apart by the times its flow's own events carry (the object's
 * clock, the runner's and the benchmark's are the machine's one clock):
 * `ready` submit → job.ready (route, signature, reservation, the flow's object reached);
 * `dispatched` job.ready → job.dispatched (the creation's commit, the Dispatcher woken, its claim,
 * the flow's object asked to deliver); `start` → the job starts at the runner (the signed POST);
 * `reported` → job.finished (the runner's signed result reaches the flow's object);
 * `applied` → the runner has the answer (the result's commit).
 */
export const STEPS = ["ready", "dispatched", "start", "reported", "applied"] as const;
export type Step = (typeof STEPS)[number];

/** One lone job as the benchmark saw it (epoch ms): submitted, begun at the runner, answered. */
export interface LoneSample {
  submitted: number;
  began: number;
  answered: number;
}

/**
 * Each step's length (ms) from a lone job's sample and the first time each kind of its flow's
 * events happened; undefined when an event is missing (the flow did not run the plain way).
 */
export function stepsOf(sample: LoneSample, at: Partial<Record<string, number>>): Record<Step, number> | undefined {
  const ready = at["job.ready"];
  const dispatched = at["job.dispatched"];
  const finished = at["job.finished"];
  if (ready === undefined || dispatched === undefined || finished === undefined) return undefined;
  return {
    ready: ready - sample.submitted,
    dispatched: dispatched - ready,
    start: sample.began - dispatched,
    reported: finished - sample.began,
    applied: sample.answered - finished,
  };
}
