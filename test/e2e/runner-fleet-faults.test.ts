import path from "node:path";
import { jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { fleetNames } from "../../runner/fleet/names.js";
import { eventually } from "../support/eventually.js";
import { loggedJobs as jobs, runsIn as runs, useFleetStack } from "../support/fleet.js";
import { flowEnd } from "../support/flow-runs.js";

/**
 * The fleet's faults on the real stack: a worker killed mid-job, the gateway killed with results
 * pending, NATS restarted mid-flow, and a drain while jobs run. Jobs log every run to a file, so
 * "ran once" and "ran at most retries + 1 times" are counted, not inferred.
 */

const stack = useFleetStack("fleet-faults");
const { tmp, fleetIn } = stack;
const admin = () => stack.admin();
const logOf = (contextId: number) => path.join(tmp, `runs-${contextId}.log`);

describe("a runner fleet's faults", () => {
  it("gives the job of a worker killed mid-job to another worker; it runs at most retries + 1 times in all", async () => {
    const fleet = await fleetIn(4);
    await fleet.gateway(["--ack-wait", "3"]);
    const a = await fleet.worker(["--concurrency", "2", "--ack-wait", "3"]);
    const b = await fleet.worker(["--concurrency", "2", "--ack-wait", "3"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(1, log, 4, 1));
    const [first] = await eventually(() => runs(log).get("j0"), 20_000);
    const victim = first === a.workDir ? a : b;
    await victim.proc.kill();
    const view = await flowEnd(admin(), fleet.contextId, flow.id, 60_000);
    expect(view.status).toBe("finished");
    const ran = runs(log).get("j0") ?? [];
    expect(ran.length).toBeGreaterThanOrEqual(2);
    expect(ran.length).toBeLessThanOrEqual(2);
    expect(ran[1]).not.toBe(first);
  });

  it("loses nothing when the gateway is killed while results are pending: it relays them after it restarts", async () => {
    const fleet = await fleetIn(6);
    const gateway = await fleet.gateway(["--ack-wait", "3"]);
    await fleet.worker(["--concurrency", "3"]);
    await fleet.worker(["--concurrency", "3"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(12, log, 1));
    await eventually(() => (runs(log).size >= 3 ? true : undefined), 20_000);
    await gateway.kill();
    // Results of the running jobs pile up in the events stream meanwhile.
    const names = fleetNames({ contextId: fleet.contextId, runnerId: fleet.runnerId });
    const nc = await connect({ servers: stack.nats().url });
    try {
      const jsm = await jetstreamManager(nc);
      const pending = await eventually(async () => {
        const info = await jsm.consumers.info(names.eventsStream, names.gatewayConsumer);
        return info.num_pending + info.num_ack_pending >= 3 ? info.num_pending + info.num_ack_pending : undefined;
      }, 15_000);
      expect(pending).toBeGreaterThanOrEqual(3);
    } finally {
      await nc.close();
    }
    await fleet.gateway(["--ack-wait", "3"]);
    const view = await flowEnd(admin(), fleet.contextId, flow.id, 90_000);
    expect(view.status).toBe("finished");
    expect(Object.keys(view.result)).toHaveLength(12);
    const byJob = runs(log);
    expect(byJob.size).toBe(12);
    expect([...byJob.entries()].filter(([, dirs]) => dirs.length !== 1)).toEqual([]);
    const relayed = await (await fetch(new URL("metrics", fleet.address))).text();
    expect(relayed).toMatch(/^fleet_reports_relayed_total\{event="result",outcome="taken"\} ([3-9]|1[0-2])$/m);
  });

  it("recovers when NATS restarts mid-flow: every job ends, and results held back meanwhile are relayed", async () => {
    const fleet = await fleetIn(4);
    const gateway = await fleet.gateway();
    const w1 = await fleet.worker(["--concurrency", "2"]);
    const w2 = await fleet.worker(["--concurrency", "2"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(10, log, 1));
    await eventually(() => (runs(log).size >= 2 ? true : undefined), 20_000);
    await stack.nats().restart();
    const view = await flowEnd(admin(), fleet.contextId, flow.id, 120_000);
    expect(view.status, JSON.stringify(view.jobs.map((j) => [j.key, j.status, j.error]))).toBe("finished");
    expect(runs(log).size).toBe(10);
    const output = [gateway, w1.proc, w2.proc].map((p) => p.output()).join("\n");
    expect(output).toMatch(/NATS connection back/);
  });

  it("drains a worker while its jobs run: they finish and report, it exits 0, and the rest of the flow runs elsewhere", async () => {
    const fleet = await fleetIn(4);
    const gateway = await fleet.gateway();
    const a = await fleet.worker(["--concurrency", "2"]);
    const b = await fleet.worker(["--concurrency", "2"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(8, log, 1.5));
    const busy = await eventually(() => {
      const byJob = runs(log);
      const onA = [...byJob.values()].filter(([dir]) => dir === a.workDir).length;
      return onA > 0 ? onA : undefined;
    }, 20_000);
    // Unsigned, or signed with another key: refused.
    expect((await fetch(new URL("admin/drain", a.ops), { method: "POST" })).status).toBe(401);
    expect((await fleet.drain(a.ops, await generateKeyPair())).status).toBe(401);
    // Signed rightly, but naming another member (a drain of b replayed to a): refused.
    const bMember = ((await (await fetch(new URL("info", b.ops))).json()) as { member: string }).member;
    expect((await fleet.drain(a.ops, fleet.jwk, bMember)).status).toBe(403);
    const answer = await fleet.drain(a.ops);
    expect(answer.status).toBe(202);
    expect((await a.proc.exited).code).toBe(0);
    expect(a.proc.output()).toMatch(/worker \S+ drained/);
    expect(busy).toBeGreaterThan(0);
    const view = await flowEnd(admin(), fleet.contextId, flow.id, 90_000);
    expect(view.status).toBe("finished");
    const byJob = runs(log);
    expect(byJob.size).toBe(8);
    expect([...byJob.values()].every((dirs) => dirs.length === 1)).toBe(true);
    expect([...byJob.values()].filter(([dir]) => dir === b.workDir).length).toBeGreaterThan(0);
    // The gateway drains too, once nothing is left to relay, and exits 0.
    expect((await fleet.drain(fleet.address)).status).toBe(202);
    expect((await gateway.exited).code).toBe(0);
    expect((await fetch(new URL("ready", b.ops))).status).toBe(200);
  });
});
