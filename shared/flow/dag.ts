import type { FlowJobInput, JobRef } from "./submission.js";

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
}

function label(job: FlowJobInput, index: number): string {
  return job.name ?? (job.id !== undefined ? `#${job.id}` : `jobs[${index}]`);
}

/**
 * Checks a submitted DAG and resolves it: duplicate ids or names, references to jobs that are
 * not in the flow, and cycles (named, e.g. `a → b → a`) are issues; otherwise every job gets its
 * final id (its own, or the next of `allocate` in order, skipping ids that jobs of the flow are
 * given) and its dependencies become ids.
 * Pure: the caller decides where allocated ids come from.
 */
export function resolveDag(jobs: FlowJobInput[], allocate: () => number): { jobs: DagJob[] } | { issues: DagIssue[] } {
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
  const ids = jobs.map((job) => {
    if (job.id !== undefined) return job.id;
    let id = allocate();
    while (byId.has(id)) id = allocate();
    return id;
  });
  return {
    jobs: jobs.map((job, i) => ({
      ...job,
      id: ids[i] as number,
      depends: [...new Set((edges[i] as number[]).map((t) => ids[t] as number))],
    })),
  };
}

/** A cycle as job indexes in dependency order, or null. Iterative DFS: 1,000-deep chains are fine. */
function findCycle(edges: number[][]): number[] | null {
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
