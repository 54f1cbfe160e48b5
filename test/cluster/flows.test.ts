import { describe, expect, inject, it } from "vitest";
import { answersIn, flowEnd } from "../support/flow-runs.js";
import { RedisCluster } from "../support/redis-cluster.js";
import { usePrivateStack } from "../support/use-private-stack.js";

const cluster = RedisCluster.attach(inject("redisCluster"));
const { stack, admin } = usePrivateStack("cluster-flows", { cluster: { seeds: cluster.seeds }, cron: false });

describe("flows over a Redis Cluster", () => {
  it("runs a diamond to its end", async () => {
    const ctx = (await admin().client.createContext()).id;
    const proc = await (await stack().registerTestRunner(admin().client, ctx)).start();
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [
        { name: "a", script: "true", script_type: "sh" },
        { name: "b", script: "true", script_type: "sh", depends: ["a"] },
        { name: "c", script: "true", script_type: "sh", depends: ["a"] },
        { name: "d", script: "true", script_type: "sh", depends: ["b", "c"] },
      ],
    });
    const end = await flowEnd(admin().client, ctx, flow.id).catch((e: Error) => {
      console.log(stack().workerLog().slice(-6000));
      throw e;
    });
    expect(end.status).toBe("finished");
    await answersIn(proc, "answered result", 4);
    expect(
      await stack()
        .sweepToEnd()
        .catch((e: Error) => e.message),
    ).toBeDefined();
  });
});
