// The counted figures `npm run bench -- --quick` holds this project to. Counts,
// never timings: a count is the same on any machine, a timing is not. Change them here only.

/** A budget: the most a counted figure of this project may be. */
export interface Budget {
  /** The figure's id (see figures.ts). */
  figure: string;
  /** The most it may be: more fails `--quick`. */
  max: number;
  /** Where it should get to, when that is below `max` (reported, not enforced). */
  goal?: number;
}

/** The budgets, checked in this order. */
export const BUDGETS: readonly Budget[] = [
  // A flow of one job: the commonest case for a webhook-driven system, its runner reporting
  // `started` and then its result (the started report lives in the flow's object: no command).
  // Three since its creation claims it for the runner and makes the sweep due in the same script
  // (the reservation, the creation, the result's commit), and the key epoch's read, which an
  // isolate makes at most once a second: four when it falls in the run.
  { figure: "lone.sent", max: 4 },
  // Batches must not get dearer than they are (0.20 when the goal was set).
  { figure: "indep100.sent", max: 0.2 },
  // The 100-job layered DAG (10 layers of 10), script internals included: 4.35 to 4.45 since a
  // job's end writes only the job (5.3 to 5.4 before). Three HSETs per job (the job at creation
  // and at its end, its message at dispatch) are the floor of today's records (docs/cost-and-performance.md,
  // Performance); the limit guards against getting dearer.
  { figure: "dag100.executed", max: 5, goal: 4 },
];
