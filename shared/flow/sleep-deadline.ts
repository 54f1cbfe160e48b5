/**
 * Sleeps that cannot end before their flow's deadline (`timeouts.flow`), found at submission
 * (docs/flows.md, "Sleeping"). Pure: `now` is handed in.
 */

/** What the check reads of a submitted job (the schema's output: `needs` defaulted, `depends` as given). */
export interface SleepCheckJob {
  id?: number | undefined;
  name?: string | undefined;
  sleep?: number | undefined;
  sleep_until?: string | undefined;
  needs: string;
  depends: (number | string)[];
}

/** A sleep refused: the job's index in the submission, the field to name, and why. */
export interface SleepIssue {
  index: number;
  field: "sleep" | "sleep_until";
  message: string;
}

/** An RFC 3339 time (with a zone: `Z` or an offset) as epoch ms, or NaN. */
export function parseTime(text: string): number {
  if (!/^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$/.test(text)) return Number.NaN;
  return Date.parse(text);
}

/**
 * Why a job's sleep cannot end before its flow's deadline (`limit` seconds from a start at
 * `now`, the earliest it can start): a sleep longer than the limit, or a time to sleep until
 * that is past it. A time that names variables is known only when the job starts (then a sleep
 * past the deadline fails the job at once, saying so).
 */
function sleepPastDeadline(
  job: { sleep?: number | undefined; sleep_until?: string | undefined },
  limit: number,
  now: number,
): string | undefined {
  if (job.sleep !== undefined && job.sleep > limit)
    return `a sleep of ${job.sleep} s cannot end within the flow's deadline (timeouts.flow: ${limit} s)`;
  if (job.sleep_until === undefined || job.sleep_until.includes("${")) return undefined;
  const until = parseTime(job.sleep_until);
  return until > now + limit * 1000
    ? `${job.sleep_until} is past the flow's deadline (timeouts.flow: ${limit} s from its start)`
    : undefined;
}

/** The least time after the flow's start a job can have finished at, and the sleeps before it. */
interface EarliestEnd {
  seconds: number;
  /** The last few jobs (indexes) of the way it had to wait along, in order; `cut` when there were more. */
  after: number[];
  cut?: boolean;
}

/** How many jobs of that way a refusal names. */
const WAY_SHOWN = 5;

/**
 * When each job can have finished at the earliest, in seconds after the flow's start (a lower
 * bound, whatever runs how long): a job finishes only once its `needs` let it start, and
 * `all_finished` starts it after every dependency finished, `any_finished` after one did, so
 * what they sleep adds up along the way; `all_done` and `none_failed` may start a job after
 * dependencies skipped at once, so nothing before it counts. A `sleep` adds its length, a
 * `sleep_until` nothing (its time is checked on its own). In dependency order (Kahn's, no
 * recursion: a chain may be 10,000 jobs long); unknown dependencies and jobs on a cycle, which
 * the submission refuses elsewhere, count as nothing.
 */
function earliestEnds(jobs: SleepCheckJob[]): EarliestEnd[] {
  const byRef = new Map<number | string, number>();
  jobs.forEach((job, i) => {
    if (job.id !== undefined) byRef.set(job.id, i);
    if (job.name !== undefined) byRef.set(job.name, i);
  });
  const deps = jobs.map((job) => [...new Set(job.depends.flatMap((ref) => byRef.get(ref) ?? []))]);
  const dependents: number[][] = jobs.map(() => []);
  const waiting = deps.map((d, i) => {
    for (const dep of d) dependents[dep]?.push(i);
    return d.length;
  });
  const ends: EarliestEnd[] = jobs.map(() => ({ seconds: 0, after: [] }));
  const ready = waiting.flatMap((n, i) => (n === 0 ? [i] : []));
  for (let next = ready.pop(); next !== undefined; next = ready.pop()) {
    const job = jobs[next] as SleepCheckJob;
    const before = startOf(job.needs, deps[next] ?? [], ends);
    ends[next] = job.sleep !== undefined ? { ...before, seconds: before.seconds + job.sleep } : before;
    for (const dependent of dependents[next] ?? []) if (--(waiting[dependent] as number) === 0) ready.push(dependent);
  }
  return ends;
}

/** When a job can start at the earliest, after these dependencies, by its `needs`. */
function startOf(needs: string, deps: number[], ends: EarliestEnd[]): EarliestEnd {
  if (deps.length === 0 || (needs !== "all_finished" && needs !== "any_finished")) return { seconds: 0, after: [] };
  let pick = deps[0] as number;
  for (const dep of deps) {
    const better =
      needs === "all_finished" ? ends[dep]!.seconds > ends[pick]!.seconds : ends[dep]!.seconds < ends[pick]!.seconds;
    if (better) pick = dep;
  }
  const end = ends[pick] as EarliestEnd;
  if (end.seconds === 0) return { seconds: 0, after: [] };
  const after = [...end.after, pick];
  const cut = end.cut === true || after.length > WAY_SHOWN;
  return { seconds: end.seconds, after: after.slice(-WAY_SHOWN), ...(cut ? { cut } : {}) };
}

const nameOf = (jobs: SleepCheckJob[], i: number) => jobs[i]?.name ?? String(jobs[i]?.id ?? `#${i}`);

/**
 * The sleeps of a submission that cannot end before the flow's deadline (`limit` seconds from a
 * start at `now` or later): each on its own (`sleepPastDeadline`), and a `sleep` that can start
 * only after sleeps it must wait for (through `all_finished` or `any_finished`) whose lengths
 * with its own add up past the limit: the first such on each way, not every one after it.
 */
export function sleepsPastDeadline(jobs: SleepCheckJob[], limit: number, now: number): SleepIssue[] {
  const issues: SleepIssue[] = [];
  const ends = jobs.some((job) => job.sleep !== undefined) ? earliestEnds(jobs) : [];
  jobs.forEach((job, i) => {
    const field = job.sleep !== undefined ? "sleep" : "sleep_until";
    const alone = sleepPastDeadline(job, limit, now);
    if (alone) {
      issues.push({ index: i, field, message: alone });
      return;
    }
    const end = ends[i];
    if (job.sleep === undefined || !end || end.seconds <= limit) return;
    // A sleep that starts past the limit waits for one refused already: that one is named.
    const start = end.seconds - job.sleep;
    if (start > limit) return;
    const way = [...(end.cut ? ["…"] : []), ...end.after.map((at) => nameOf(jobs, at))].join(" → ");
    issues.push({
      index: i,
      field,
      message: `a sleep of ${job.sleep} s cannot end within the flow's deadline (timeouts.flow: ${limit} s): it starts no sooner than ${start} s after the flow's start, once the sleeps it waits for ended (${way})`,
    });
  });
  return issues;
}
