import { overSource } from "./map.js";
import { FLOW_LIMITS, type FlowJobInput, type JobRef } from "./submission.js";

/** A problem with a submitted DAG, naming the job (by its place in `jobs`) and the field. */
export interface DagIssue {
  field: string;
  message: string;
}

/** A job of a validated DAG: its final id and its dependencies as ids (its rules' defaults may be left out). */
export interface DagJob extends Omit<FlowJobInput, "depends" | "needs" | "allow_failure"> {
  id: number;
  depends: number[];
  needs?: FlowJobInput["needs"];
  allow_failure?: boolean;
  /** A compensation (made from a job's `compensate`): the id of the job it undoes. */
  compensates?: number;
}

/** Ids 1, 2, 3…, one per call. */
function counter(): () => number {
  let n = 0;
  return () => ++n;
}

/** What a compensation's name adds to its job's key: `book.compensate`. */
export const COMPENSATION_SUFFIX = ".compensate";
/** The longest name a job's record keeps. */
const LONGEST_NAME = 64;

function label(job: FlowJobInput, index: number): string {
  return job.name ?? (job.id !== undefined ? `#${job.id}` : `jobs[${index}]`);
}

/**
 * Checks a submitted DAG and resolves it: duplicate ids or names, references to jobs that are
 * not in the flow, and cycles (named, e.g. `a → b → a`) are issues; otherwise every job gets its
 * final id (its own, or the next of `allocate` in order, skipping ids that jobs of the flow are
 * given) and its dependencies become ids. Each job's `compensate` becomes a job of its own,
 * after all of them (`withCompensations`).
 * Pure: the caller decides where allocated ids come from (by default 1, 2, 3…: for a check, whose
 * ids are thrown away; a constant would never get past an id a job gives).
 */
export function resolveDag(
  jobs: FlowJobInput[],
  allocate: () => number = counter(),
): { jobs: DagJob[] } | { issues: DagIssue[] } {
  const issues: DagIssue[] = [];
  const byId = new Map<number, number>();
  const byName = new Map<string, number>();
  jobs.forEach((job, i) => {
    if (job.id !== undefined) {
      const seen = byId.get(job.id);
      if (seen !== undefined)
        issues.push({ field: `jobs.${i}.id`, message: `duplicate id ${job.id} (also jobs.${seen})` });
      else byId.set(job.id, i);
    }
    if (job.name !== undefined) {
      const seen = byName.get(job.name);
      if (seen !== undefined)
        issues.push({ field: `jobs.${i}.name`, message: `duplicate name ${job.name} (also jobs.${seen})` });
      else byName.set(job.name, i);
    }
  });
  const find = (ref: JobRef): number | undefined => (typeof ref === "number" ? byId.get(ref) : byName.get(ref));

  const edges: number[][] = jobs.map((job, i) =>
    job.depends.flatMap((ref, d) => {
      const target = find(ref);
      if (target === undefined) {
        issues.push({
          field: `jobs.${i}.depends.${d}`,
          message: `job ${label(job, i)} depends on ${JSON.stringify(ref)}, which is not a job of this flow`,
        });
        return [];
      }
      return [target];
    }),
  );
  jobs.forEach((job, i) => {
    const issue = mapIssue(
      job,
      i,
      (edges[i] as number[]).map((t) => refsOf(jobs[t] as FlowJobInput)),
    );
    if (issue) issues.push(issue);
  });
  if (issues.length > 0) return { issues };

  const cycle = findCycle(edges);
  if (cycle) {
    const names = [...cycle, cycle[0] as number].map((i) => label(jobs[i] as FlowJobInput, i));
    return {
      issues: [
        {
          field: `jobs.${cycle[0]}.depends`,
          message: `the jobs form a dependency cycle: ${names.join(" → ")} (→ reads "depends on")`,
        },
      ],
    };
  }

  // An allocated id may be one the submission gives another job: skip it, or two jobs would share it.
  const next = () => {
    let id = allocate();
    while (byId.has(id)) id = allocate();
    return id;
  };
  const ids = jobs.map((job) => job.id ?? next());
  const resolved = jobs.map((job, i) => ({
    ...job,
    id: ids[i] as number,
    depends: [...new Set((edges[i] as number[]).map((t) => ids[t] as number))],
  }));
  return withCompensations(resolved, edges, byName, next);
}

/**
 * The flow's jobs followed by their compensations: each job that gives `compensate` gets a job
 * of its own after every job of the flow (in its job's order), with an allocated id, named
 * `<job's key>.compensate`, and `compensates` naming its job. A compensation waits for the
 * compensations of the jobs that depend on its job: on each path downstream the nearest one (a
 * job without one passes the wait on to its own dependents), so the flow unwinds in reverse
 * order and independent branches unwind side by side. Compensations count toward the flow's
 * jobs; a name taken by a job, or too long for its record, is an issue.
 */
function withCompensations(
  jobs: DagJob[],
  edges: number[][],
  byName: Map<string, number>,
  next: () => number,
): { jobs: DagJob[] } | { issues: DagIssue[] } {
  const undone = jobs.flatMap((job, i) => (job.compensate ? [i] : []));
  if (undone.length === 0) return { jobs };
  const issues: DagIssue[] = [];
  const total = jobs.length + undone.length;
  if (total > FLOW_LIMITS.jobsPerFlow)
    issues.push({
      field: "jobs",
      message: `a flow has at most ${FLOW_LIMITS.jobsPerFlow} jobs, compensations counted: this one has ${jobs.length} and ${undone.length} compensations`,
    });
  const names = undone.map((i) => `${jobs[i]?.name ?? jobs[i]?.id}${COMPENSATION_SUFFIX}`);
  undone.forEach((i, n) => {
    const name = names[n] as string;
    if (name.length > LONGEST_NAME)
      issues.push({
        field: `jobs.${i}.name`,
        message: `a job with compensate has a name of at most ${LONGEST_NAME - COMPENSATION_SUFFIX.length} characters: its compensation is named ${name.slice(0, 20)}…${COMPENSATION_SUFFIX}`,
      });
    const taker = byName.get(name);
    if (taker !== undefined)
      issues.push({
        field: `jobs.${taker}.name`,
        message: `${name} is the name of job ${jobs[i]?.name}'s compensation`,
      });
  });
  if (issues.length > 0) return { issues };
  const companion = new Map(undone.map((i) => [i, next()]));
  const waits = nearestDownstream(edges, (i) => companion.has(i));
  return {
    jobs: [
      ...jobs,
      ...undone.map((i, n): DagJob => {
        const job = jobs[i] as DagJob;
        const { script, script_type, timeout, retries, env_vars, runner_id } = job.compensate as NonNullable<
          DagJob["compensate"]
        >;
        return {
          id: companion.get(i) as number,
          name: names[n] as string,
          script,
          script_type,
          timeout,
          retries,
          env_vars,
          prerequisites: [],
          ...(runner_id !== undefined ? { runner_id } : {}),
          depends: (waits[i] ?? []).map((k) => companion.get(k) as number),
          compensates: job.id,
        };
      }),
    ],
  };
}

/**
 * For each job (by index; `edges[i]` its dependencies), the nearest `marked` jobs downstream of
 * it: a marked dependent, or what is nearest to an unmarked one. Each job is worked out once, its
 * dependents first (the DAG has no cycle), so a chain of 2,000 costs 2,000 steps.
 */
function nearestDownstream(edges: number[][], marked: (i: number) => boolean): number[][] {
  const dependents: number[][] = edges.map(() => []);
  edges.forEach((deps, i) => {
    for (const dep of deps) dependents[dep]?.push(i);
  });
  const nearest: (number[] | undefined)[] = new Array<number[] | undefined>(edges.length);
  for (let root = 0; root < edges.length; root++) {
    const stack = [root];
    while (stack.length > 0) {
      const at = stack[stack.length - 1] as number;
      if (nearest[at]) {
        stack.pop();
        continue;
      }
      const open = (dependents[at] as number[]).filter((k) => !marked(k) && !nearest[k]);
      if (open.length > 0) {
        stack.push(...open);
        continue;
      }
      const found = new Set<number>();
      for (const k of dependents[at] as number[]) {
        if (marked(k)) found.add(k);
        else for (const m of nearest[k] as number[]) found.add(m);
      }
      nearest[at] = [...found];
      stack.pop();
    }
  }
  return nearest as number[][];
}

/** The names a job of a submission may be called by in a map's `over`: its name, its id. */
function refsOf(job: FlowJobInput): string[] {
  return [...(job.name !== undefined ? [job.name] : []), ...(job.id !== undefined ? [String(job.id)] : [])];
}

/**
 * Why a map's `over` does not name one of its dependencies (`deps`: the names each is known by),
 * or undefined (no map, or it does). Job i of the submission.
 */
export function mapIssue(
  job: Pick<FlowJobInput, "map" | "name" | "id">,
  i: number,
  deps: string[][],
): DagIssue | undefined {
  const over = job.map?.over;
  if (over === undefined || overSource(over, deps)) return undefined;
  return {
    field: `jobs.${i}.map.over`,
    message: `map over ${JSON.stringify(over)}: it must name one of the job's dependencies and a result key (<dependency>.<key>)`,
  };
}

/** A cycle as job indexes in dependency order, or null. Iterative DFS: 1,000-deep chains are fine. */
export function findCycle(edges: number[][]): number[] | null {
  const state = new Uint8Array(edges.length); // 0 new, 1 on the stack, 2 done
  for (let root = 0; root < edges.length; root++) {
    if (state[root] !== 0) continue;
    const stack: { node: number; next: number }[] = [{ node: root, next: 0 }];
    state[root] = 1;
    while (stack.length > 0) {
      const top = stack[stack.length - 1] as { node: number; next: number };
      const targets = edges[top.node] as number[];
      if (top.next >= targets.length) {
        state[top.node] = 2;
        stack.pop();
        continue;
      }
      const target = targets[top.next++] as number;
      if (state[target] === 1) {
        const path = stack.map((s) => s.node);
        return path.slice(path.indexOf(target));
      }
      if (state[target] === 0) {
        state[target] = 1;
        stack.push({ node: target, next: 0 });
      }
    }
  }
  return null;
}
