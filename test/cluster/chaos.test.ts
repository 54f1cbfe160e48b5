import { expect, inject, it } from "vitest";
import { soak } from "../chaos/soak.js";
import { RedisCluster } from "../support/redis-cluster.js";

// The short chaos soak (test/chaos/) over the Redis Cluster: 30 s of flows (waits, sleeps,
// sagas, maps and child flows among them) and events under random faults (the context's master
// and every master paused, the REST endpoint killed, the Worker restarted, runners killed and
// refusing), and half-way through the master serving the soak's context killed (SIGKILL): its
// replica is promoted, and the node comes back as that replica's replica. Every invariant of the
// single server's soak holds: a master that dies loses only what it had not sent its replica,
// nothing on a local network (docs/deploy.md, "What a failover can lose"). The seed is printed;
// CHAOS_SEED=<seed> repeats a run.

const cluster = RedisCluster.attach(inject("redisCluster"));

it("keeps every invariant through half a minute of random faults and a master's failover", async () => {
  const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`cluster chaos soak seed ${seed} (CHAOS_SEED=${seed} repeats it)`);
  const report = await soak({
    seed,
    durationMs: 30_000,
    cluster,
    failover: "kill",
    log: (line) => console.log(`cluster chaos ${seed}: ${line}`),
  });
  const table = report.invariants.map((i) => `${i.held ? "ok  " : "FAIL"}  ${i.name}: ${i.detail}`).join("\n");
  console.log(`cluster chaos soak seed ${seed}: ${report.flows} flows, faults: ${report.faults.join("; ")}\n${table}`);
  expect(report.faults.filter((f) => f.startsWith("failover: "))).toHaveLength(1);
  expect(
    report.invariants.filter((i) => !i.held),
    `seed ${seed}\n${table}`,
  ).toEqual([]);
}, 480_000);
