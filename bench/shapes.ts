import { layeredJobs, shJobs } from "../test/support/jobs.js";

// The shapes of work both systems run, built once here so that both run the same thing: the same
// number of jobs, the same dependencies, the same depth.

/** How many children each job of the 100-job tree has (1 + 3 + 9 + 27 + 60 jobs, depth 5). */
export const TREE_FANOUT = 3;

/** A job of this project's flow: an sh job the test runner answers at once. */
export interface OurJob {
  name: string;
  script: string;
  script_type: "sh";
  depends?: string[];
}

/** A flow of one job. */
export const loneJobs = (prefix: string): OurJob[] => shJobs(prefix, 1);

/** `n` jobs, none depending on another. */
export const independentJobs = (prefix: string, n: number): OurJob[] => shJobs(prefix, n);

/** The 100-job layered DAG: 10 layers of 10, each job depending on every job of the layer before. */
export const layeredDag = (prefix: string): OurJob[] => layeredJobs(prefix, 10, 10);

/** The parent of job `i` in the tree (none for the root, job 0). */
export const treeParent = (i: number): number | undefined => (i === 0 ? undefined : Math.floor((i - 1) / TREE_FANOUT));

/**
 * The `n`-job tree as a DAG: each job depends on its parent, so the root runs first and the
 * leaves last. (BullMQ runs the same tree the other way round: children before their parent.)
 */
export function treeJobs(prefix: string, n: number): OurJob[] {
  return Array.from({ length: n }, (_, i) => {
    const parent = treeParent(i);
    return {
      name: `${prefix}${i}`,
      script: "true",
      script_type: "sh" as const,
      depends: parent === undefined ? [] : [`${prefix}${parent}`],
    };
  });
}

/** An `n`-job chain: each job depends on the one before. */
export function chainJobs(prefix: string, n: number): OurJob[] {
  return Array.from({ length: n }, (_, i) => ({
    name: `${prefix}${i}`,
    script: "true",
    script_type: "sh" as const,
    depends: i === 0 ? [] : [`${prefix}${i - 1}`],
  }));
}

/** A node of a BullMQ flow (FlowProducer.add's FlowJob), kept to what the benchmark uses. */
export interface BullNode {
  name: string;
  queueName: string;
  data: { tag: string };
  children?: BullNode[];
}

/** The same `n`-job tree as a BullMQ flow: job i's children are jobs 3i+1 … 3i+3. */
export function bullTree(queueName: string, tag: string, n: number, i = 0): BullNode {
  const children: BullNode[] = [];
  for (let c = i * TREE_FANOUT + 1; c <= i * TREE_FANOUT + TREE_FANOUT && c < n; c++) {
    children.push(bullTree(queueName, tag, n, c));
  }
  return { name: `t${i}`, queueName, data: { tag }, ...(children.length ? { children } : {}) };
}

/** An `n`-job chain as a BullMQ flow: the last job is the root, the first the deepest child. */
export function bullChain(queueName: string, tag: string, n: number): BullNode {
  let node: BullNode = { name: "c0", queueName, data: { tag } };
  for (let i = 1; i < n; i++) node = { name: `c${i}`, queueName, data: { tag }, children: [node] };
  return node;
}
