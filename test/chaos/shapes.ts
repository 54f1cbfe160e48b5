import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { Random } from "../support/random.js";

type Job = FlowSubmissionInput["jobs"][number];

/**
 * A flow of a random shape — a chain, a diamond, a fan out and in, layers, or a lone job — whose
 * job names start with `prefix`. One flow in five has a job that fails on purpose (its name
 * holds "doomed"; runners are told to fail those); the others must finish.
 */
export function flowShape(random: Random, prefix: string, retries: number): { jobs: Job[]; doomed: string[] } {
  const job = (name: string, depends: string[] = []): Job => ({
    name: `${prefix}-${name}`,
    script: "true",
    script_type: "sh",
    retries,
    depends: depends.map((d) => `${prefix}-${d}`),
  });
  const shapes: (() => Job[])[] = [
    () => Array.from({ length: 2 + Math.floor(random() * 4) }, (_, i) => job(`c${i}`, i === 0 ? [] : [`c${i - 1}`])),
    () => [job("top"), job("left", ["top"]), job("right", ["top"]), job("bottom", ["left", "right"])],
    () => {
      const width = 2 + Math.floor(random() * 5);
      const middle = Array.from({ length: width }, (_, i) => job(`m${i}`, ["src"]));
      return [
        job("src"),
        ...middle,
        job(
          "sink",
          middle.map((_, i) => `m${i}`),
        ),
      ];
    },
    () =>
      Array.from({ length: 9 }, (_, i) =>
        job(`l${i}`, i < 3 ? [] : [0, 1, 2].map((k) => `l${Math.floor(i / 3) * 3 - 3 + k}`)),
      ),
    () => [job("alone")],
  ];
  const jobs = (shapes[Math.floor(random() * shapes.length)] as () => Job[])();
  const doomed: string[] = [];
  if (random() < 0.2) {
    const victim = jobs[Math.floor(random() * jobs.length)] as Job;
    const renamed = `${victim.name}-doomed`;
    for (const j of jobs) j.depends = (j.depends ?? []).map((d) => (d === victim.name ? renamed : d));
    victim.name = renamed;
    victim.retries = 1;
    doomed.push(renamed);
  }
  return { jobs, doomed };
}
