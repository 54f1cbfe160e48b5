import { ApiError, type CoordinatorClient } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "./eventually.js";

/** The statuses a flow ends in. */
const ENDED: ReadonlySet<string> = new Set(["finished", "error", "compensated", "compensation_failed"]);

// What end-to-end tests read off a flow's run: the test runner's answers, the flow's end, and the
// attempts runners began, from what they printed. Apart from private-stack.ts, as tests on the
// shared stack read them too.

/**
 * The test runner's `answered …` lines that start with `match` (or match it, a RegExp), once there
 * are `count` of them. A flow can read as ended before the runner has logged the last answers
 * (their responses are still on the way back), so tests wait for the lines instead of reading the
 * output once.
 */
export function answersIn(
  proc: { output(): string },
  match: string | RegExp,
  count: number,
  timeoutMs = 10_000,
): Promise<string[]> {
  const wanted = (line: string) => (typeof match === "string" ? line.startsWith(match) : match.test(line));
  return eventually(
    () => {
      // Complete lines only: the last piece is empty or a line still being written.
      const lines = proc.output().split("\n").slice(0, -1).filter(wanted);
      return lines.length >= count ? lines : undefined;
    },
    timeoutMs,
    100,
    `${count} test runner lines ${match}`,
  );
}

/**
 * Waits for a flow to end (finished, error, or unwound: compensated, compensation_failed) and
 * returns its view. A 503 (storage away, as a
 * fault test may have made it) is a reason to look again, not a failure.
 */
export async function flowEnd(
  client: CoordinatorClient,
  contextId: number,
  flowId: number,
  timeoutMs = 60_000,
): Promise<FlowView> {
  let last: FlowView | undefined;
  try {
    return await eventually(
      async () => {
        const view = await client.loadFlow(contextId, flowId).catch((error: unknown) => {
          if (error instanceof ApiError && error.status === 503) return undefined;
          throw error;
        });
        last = view ?? last;
        return view && ENDED.has(view.status) ? view : undefined;
      },
      timeoutMs,
      150,
      `the end of flow ${flowId}`,
    );
  } catch (error) {
    // Say where the flow stood: which jobs wait, and why.
    const jobs = last?.jobs.map((j) => ({
      job: j.key,
      status: j.status,
      attempt: j.attempt,
      ...(j.waiting ? { waiting: j.waiting } : {}),
    }));
    throw new Error(`${(error as Error).message}; last seen ${last?.status ?? "never"}: ${JSON.stringify(jobs)}`, {
      cause: error,
    });
  }
}

/** One attempt a runner began: of job `job` (its name) of flow `flow`. */
export interface Run {
  flow: number;
  job: string;
  attempt: number;
}

/**
 * The attempts runners began, from what they printed: a test runner's `ran <job> flow <f>
 * attempt <n>` and the reference runner's `job <id> (<job>, flow <f>, attempt <n>, <type>) start`.
 */
export function runsIn(...outputs: string[]): Run[] {
  const runs: Run[] = [];
  for (const line of outputs.join("\n").split("\n")) {
    const m =
      /^ran (\S+) flow (\d+) attempt (\d+)/.exec(line) ??
      /job \d+ \(([^,]+), flow (\d+), attempt (\d+), \w+\) start$/.exec(line);
    if (m) runs.push({ job: m[1] as string, flow: Number(m[2]), attempt: Number(m[3]) });
  }
  return runs;
}

/** The attempts begun per job of one flow, by job name, in the order they began. */
export function attemptsOf(runs: Run[], flowId: number): Record<string, number[]> {
  const byJob: Record<string, number[]> = {};
  for (const run of runs) if (run.flow === flowId) (byJob[run.job] ??= []).push(run.attempt);
  return byJob;
}
