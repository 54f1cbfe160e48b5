// The saga the compensation tests of the flow machine share: book → charge → ship, each with a
// compensation, and the run to ship's failure.
import { jobIn, started, type Driver, type JobIn } from "./flow-sim.js";

/** A job's `compensate` that echoes what it undoes, with `fields` over it. */
export const undo = (what: string, fields: Partial<NonNullable<JobIn["compensate"]>> = {}) => ({
  compensate: { script: `echo undo ${what}`, script_type: "sh" as const, ...fields },
});

/** book → charge → ship, each with a compensation: ids 100-102, their compensations 103-105. */
export const SAGA: JobIn[] = [
  jobIn({ name: "book", ...undo("book") }),
  jobIn({ name: "charge", depends: ["book"], ...undo("charge", { retries: 1 }) }),
  jobIn({ name: "ship", depends: ["charge"], ...undo("ship") }),
];
export const [BOOK, CHARGE, SHIP, UNBOOK, REFUND, UNSHIP] = [100, 101, 102, 103, 104, 105] as const;

/** The saga run to ship's failure: book and charge finished. */
export function failedAtShip(): Driver {
  const d = started(SAGA);
  d.run(BOOK, { result: { booking: "B-7" } });
  d.run(CHARGE, { result: { payment: "P-9", amount: "12.50" } });
  return d;
}
