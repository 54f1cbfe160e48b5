import type { TestProject } from "vitest/node";
import { startRedisCluster, type ClusterDescription } from "./redis-cluster.js";

declare module "vitest" {
  export interface ProvidedContext {
    /** The Redis Cluster the `cluster` project's files share (test/support/redis-cluster.ts). */
    redisCluster: ClusterDescription;
  }
}

/**
 * The `cluster` project's global setup: one real Redis Cluster (three masters, a replica each)
 * for all its files, which reach it with `inject("redisCluster")` and `RedisCluster.attach`.
 * Its files run one at a time: the failover test kills a master, and puts the cluster back
 * together (the node started again, as its successor's replica) before it ends.
 */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const cluster = await startRedisCluster();
  project.provide("redisCluster", cluster.description);
  return () => cluster.stop();
}
