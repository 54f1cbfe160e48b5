import { Problem } from "./problem.js";

// Apart from store.ts (which needs the Workers types): toProblem, which Node code loads too, reads it.

/**
 * Whether this isolate's storage was declared a Redis Cluster (STORAGE_CLUSTER), as its store was
 * last built; and whether a CROSSSLOT refusal without it was logged yet (once an isolate).
 */
const cluster = { declared: false, warned: false };

/** Called by the store's factory with what the bindings say (STORAGE_CLUSTER = "true"). */
export function declareCluster(declared: boolean): void {
  cluster.declared = declared;
}

/**
 * What a CROSSSLOT refusal (`CrossSlotError`: nothing of the call ran) is answered. Without
 * STORAGE_CLUSTER the REST endpoint fronts a Redis Cluster the store was not told of: the first
 * script that joins a context's keys with a global one (the key epoch's read, at the first signed
 * request) is refused, and so is every one after it. That is a setting to change, not a bug: 503
 * naming it, logged once an isolate (not once a request). With STORAGE_CLUSTER set, a script that
 * still spans slots is a bug in the key layout: undefined, for the caller's 500.
 */
export function crossSlotProblem(error: Error): Problem | undefined {
  if (cluster.declared) return undefined;
  const detail =
    "storage is a Redis Cluster (it refused keys of two hash slots: CROSSSLOT) and the Worker was not told so: " +
    'set the var STORAGE_CLUSTER = "true" (docs/deploy.md, "Redis Cluster"); nothing of the refused call was stored';
  if (!cluster.warned) {
    cluster.warned = true;
    console.error(`storage: ${detail}. ${error.message}`);
  }
  return new Problem("storage-cluster-undeclared", detail, { setting: "STORAGE_CLUSTER" });
}
