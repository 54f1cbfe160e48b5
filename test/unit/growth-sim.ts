import type { FlowEvent } from "../../shared/flow/index.js";
import { jobIn, T, type Driver, type JobIn } from "./flow-sim.js";

// The flows the growth tests grow (flow-machine-growth.test.ts, flow-growth-rebuild.test.ts): a
// list, a map over its files, a summary; and the events that expand a map or add jobs.

export const list = (files: unknown[] | string): JobIn =>
  jobIn({ name: "list", script: `echo ${typeof files === "string" ? files : JSON.stringify(files)}` });
export const process = (extra: Partial<JobIn> = {}): JobIn =>
  jobIn({ name: "process", depends: ["list"], map: { over: "list.files" }, env_vars: { MODE: "fast" }, ...extra });
export const summarize = jobIn({ name: "summarize", depends: ["process"] });

/** Ends job `id` (the list) with `files` as its `files` value. */
export const listed = (d: Driver, files: unknown[] | string) =>
  d.run(100, { result: { files: typeof files === "string" ? files : JSON.stringify(files) } });

export const expanded = (job: number, first = 200, message = 5000): FlowEvent => ({
  type: "expanded",
  job,
  ids: { job: first, message },
  at: T + 5,
});

/** A finished report of job `id`'s current attempt that adds `jobs` (ids from 300, messages from 9000). */
export function finishedWith(d: Driver, id: number, jobs: unknown[], ids: false | undefined = undefined): FlowEvent {
  const attempt = d.job(id).attempt;
  const common = { job: id, attempt, runner: 1, at: 2_000 };
  d.send({ type: "assigned", ...common });
  d.send({ type: "delivered", ...common, acknowledged: true });
  return {
    type: "finished",
    ...common,
    result: { n: "1" },
    jobs,
    ...(ids === false ? {} : { ids: { job: 300, message: 9000 } }),
  };
}
