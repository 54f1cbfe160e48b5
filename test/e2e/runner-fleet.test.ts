import { writeFileSync } from "node:fs";
import path from "node:path";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import { fleetNames } from "../../runner/fleet/names.js";
import { DEFAULT_FLEET_SETUP, ensureFleet } from "../../runner/fleet/setup.js";
import { eventually } from "../support/eventually.js";
import { loggedJobs as jobs, runsIn as runs, useFleetStack } from "../support/fleet.js";
import { flowEnd } from "../support/flow-runs.js";

/**
 * The runner fleet on NATS JetStream, on the real stack: a `wrangler dev` coordinator, a
 * nats-server of this file's own (JetStream, a temporary store), and gateway and worker
 * processes of the reference runner running real sh jobs. Each test has a context and a
 * registered runner (so streams) of its own.
 */

const stack = useFleetStack("fleet");
const { tmp } = stack;
const admin = () => stack.admin();
const fleetIn = (concurrency: number, scriptTypes?: ("sh" | "python" | "v")[], pull = false) =>
  stack.fleetIn(concurrency, { ...(scriptTypes ? { scriptTypes } : {}), pull });

describe("a runner fleet on NATS JetStream", () => {
  it("runs a 200-job flow on one registered runner through a gateway and three workers, each job once, spread over the workers", async () => {
    // One worker first, for the figure: the same jobs per slot on one worker and on three.
    const rate = async (workers: number, n: number) => {
      const fleet = await fleetIn(4 * workers);
      await fleet.gateway();
      const dirs = [];
      // The last worker holds only the runner's public key: a worker signs nothing.
      const publicKey = path.join(tmp, `public-${fleet.contextId}.json`);
      writeFileSync(publicKey, JSON.stringify({ kty: "OKP", crv: "Ed25519", x: fleet.jwk.x }));
      for (let i = 0; i < workers; i++) {
        const own = i === workers - 1 ? ["--key-file", publicKey] : [];
        dirs.push((await fleet.worker(["--concurrency", "4", ...own])).workDir);
      }
      const log = path.join(tmp, `runs-${fleet.contextId}.log`);
      const began = Date.now();
      const flow = await admin().submitFlow(fleet.contextId, jobs(n, log, 0.05));
      const view = await flowEnd(admin(), fleet.contextId, flow.id, 120_000);
      const seconds = (Date.now() - began) / 1000;
      expect(view.status, JSON.stringify(view.error)).toBe("finished");
      return { log, dirs, seconds, view };
    };
    const one = await rate(1, 60);
    const three = await rate(3, 200);
    const byJob = runs(three.log);
    expect(byJob.size).toBe(200);
    expect([...byJob.values()].filter((dirs) => dirs.length !== 1)).toEqual([]);
    const perWorker = three.dirs.map((dir) => [...byJob.values()].filter(([ran]) => ran === dir).length);
    expect(
      perWorker.every((count) => count > 0),
      JSON.stringify(perWorker),
    ).toBe(true);
    expect(Object.keys(three.view.result)).toHaveLength(200);
    console.log(
      `fleet: 60 jobs on 1 worker (4 slots) ${(60 / one.seconds).toFixed(1)} jobs/s; 200 jobs on 3 workers (12 slots) ${(200 / three.seconds).toFixed(1)} jobs/s, ${perWorker.join(" / ")} per worker`,
    );
  });

  it("runs a flow with the gateway pulling (leases acknowledged once stored), and with one process in combined mode", async () => {
    const pulled = await fleetIn(4, undefined, true);
    const gateway = await pulled.gateway(["--batch", "8"]);
    await pulled.worker(["--concurrency", "4"]);
    const log = path.join(tmp, `runs-${pulled.contextId}.log`);
    const flow = await admin().submitFlow(pulled.contextId, jobs(12, log, 0.2));
    const view = await flowEnd(admin(), pulled.contextId, flow.id, 60_000);
    expect(view.status, JSON.stringify(view.error)).toBe("finished");
    expect([...runs(log).values()].map((dirs) => dirs.length)).toEqual(Array(12).fill(1));
    expect(gateway.output()).toMatch(/operations on http:\/\/127\.0\.0\.1:\d+\//);

    const combined = await fleetIn(2);
    const both = await combined.gateway(["--mode", "combined", "--concurrency", "2"]);
    await both.waitForLine(/fleet worker \S+ of runner \d+ .* taking jobs/, 10_000);
    const log2 = path.join(tmp, `runs-${combined.contextId}.log`);
    const flow2 = await admin().submitFlow(combined.contextId, jobs(5, log2, 0.1));
    expect((await flowEnd(admin(), combined.contextId, flow2.id, 60_000)).status).toBe("finished");
    expect(runs(log2).size).toBe(5);
    expect(await (await fetch(new URL("info", combined.address))).json()).toMatchObject({ mode: "combined", slots: 2 });
  });

  it("stops a running job on its worker when the flow is cancelled, and the gate keeps a queued one from starting", async () => {
    const fleet = await fleetIn(1);
    await fleet.gateway();
    const { proc } = await fleet.worker(["--concurrency", "1"]);
    const log = path.join(tmp, `runs-${fleet.contextId}.log`);
    const flow = await admin().submitFlow(fleet.contextId, jobs(1, log, 30));
    await eventually(() => (runs(log).size === 1 ? true : undefined), 20_000);
    await admin().cancelFlow(fleet.contextId, flow.id, "enough");
    expect((await flowEnd(admin(), fleet.contextId, flow.id, 30_000)).status).toBe("error");
    // Killed, not left to sleep its 30 s: by the coordinator's cancel, or, when the cancel's
    // commit came first, by the 409 that answers the job's own first report (both seen).
    await proc.waitForLine(/end: error after \d+\.\d s: .*cancelled: (enough|409 stale-attempt)/, 10_000);

    // A job waiting in the work stream: its only worker so far runs python, not sh (and hands it
    // back, however often, since --max-deliver is high). Cancelled there, it never starts.
    const queued = await fleetIn(1);
    await queued.gateway();
    const python = await queued.worker(["--script-types", "python", "--max-deliver", "1000"]);
    const log2 = path.join(tmp, `runs-${queued.contextId}.log`);
    const flow2 = await admin().submitFlow(queued.contextId, jobs(1, log2, 0.1));
    await eventually(async () => {
      const metrics = await (await fetch(new URL("metrics", queued.address))).text();
      return /^fleet_deliveries_total\{outcome="stored"\} 1$/m.test(metrics) ? true : undefined;
    }, 20_000);
    await admin().cancelFlow(queued.contextId, flow2.id, "not now");
    expect((await flowEnd(admin(), queued.contextId, flow2.id, 30_000)).status).toBe("error");
    // Whichever worker meets it next, the python one or a new sh one, drops it unrun.
    const sh = await queued.worker(["--script-types", "sh"]);
    await eventually(
      () =>
        /job \d+ \(j0, .*\) not run: it is cancelled/.test(python.proc.output() + sh.proc.output()) ? true : undefined,
      20_000,
    );
    await new Promise((r) => setTimeout(r, 500));
    expect(runs(log2).size).toBe(0);
  });

  it("sends a job no worker can start to the dead letters after its deliveries, and reports it as the job's error, naming it", async () => {
    const fleet = await fleetIn(2, ["sh", "python", "v"]);
    await fleet.gateway();
    await fleet.worker(["--max-deliver", "2"]);
    const flow = await admin().submitFlow(fleet.contextId, {
      start: true,
      jobs: [{ name: "odd", script_type: "v", script: "println('hi')", retries: 0 }],
    });
    const view = await flowEnd(admin(), fleet.contextId, flow.id, 60_000);
    expect(view.status).toBe("error");
    const job = view.jobs.find((j) => j.key === "odd" || j.name === "odd");
    const names = fleetNames({ contextId: fleet.contextId, runnerId: fleet.runnerId });
    expect(job?.error).toMatch(/dead letter: .*no live worker runs v scripts \(delivered 2 times\)/);
    expect(job?.error).toContain(names.deadStream);
    const nc = await connect({ servers: stack.nats().url });
    try {
      const jsm = await jetstreamManager(nc);
      const dead = await jsm.streams.info(names.deadStream);
      expect(dead.state.messages).toBe(1);
      const message = await jsm.streams.getMessage(names.deadStream, { seq: dead.state.first_seq });
      expect(message?.header.get("Fleet-Reason")).toMatch(/no live worker runs v scripts/);
      expect((message?.json() as { job_id: number }).job_id).toBe(job?.id);
    } finally {
      await nc.close();
    }
  });

  it("serves health, readiness, Prometheus metrics and info on the gateway and each worker; refuses work past the fleet's capacity with 429", async () => {
    // Registered for 4 at once, but the fleet is one worker of 2 slots, capped at 2 by the gateway.
    const fleet = await fleetIn(4);
    const gateway = await fleet.gateway(["--capacity", "2"]);
    const health = await fetch(new URL("health", fleet.address));
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ ok: true, nats: "connected", coordinator: "reachable" });
    // No worker yet: the fleet can take nothing.
    expect((await fetch(new URL("ready", fleet.address))).status).toBe(503);
    const { ops } = await fleet.worker(["--concurrency", "2"]);
    await eventually(async () => ((await fetch(new URL("ready", fleet.address))).ok ? true : undefined), 10_000);
    expect(await (await fetch(new URL("health", ops))).json()).toMatchObject({ ok: true, nats: "connected" });

    const log = path.join(tmp, `runs-${fleet.contextId}.log`);
    const flow = await admin().submitFlow(fleet.contextId, jobs(6, log, 0.5));
    expect((await flowEnd(admin(), fleet.contextId, flow.id, 90_000)).status).toBe("finished");
    expect([...runs(log).values()].every((dirs) => dirs.length === 1)).toBe(true);
    expect(gateway.output()).toMatch(/refused delivery of message .*: at the concurrency limit \(429\)/);

    const gatewayMetrics = await (await fetch(new URL("metrics", fleet.address))).text();
    expect(gatewayMetrics).toMatch(/^fleet_deliveries_total\{outcome="stored"\} 6$/m);
    expect(gatewayMetrics).toMatch(/^fleet_deliveries_total\{outcome="busy"\} [1-9]/m);
    expect(gatewayMetrics).toMatch(/^fleet_reports_relayed_total\{event="result",outcome="taken"\} 6$/m);
    expect(gatewayMetrics).toMatch(/^fleet_consumer_pending\{consumer="workers"\} 0$/m);
    expect(gatewayMetrics).toMatch(/^fleet_capacity 2$/m);
    const workerMetrics = await (await fetch(new URL("metrics", ops))).text();
    expect(workerMetrics).toMatch(/^fleet_jobs_total\{outcome="finished"\} 6$/m);
    expect(workerMetrics).toMatch(/^fleet_job_duration_seconds_count\{script_type="sh"\} 6$/m);
    expect(workerMetrics).toMatch(/^fleet_worker_in_flight\{worker="[^"]+"\} 0$/m);

    const info = (await (await fetch(new URL("info", fleet.address))).json()) as Record<string, unknown>;
    const names = fleetNames({ contextId: fleet.contextId, runnerId: fleet.runnerId });
    expect(info).toMatchObject({
      mode: "gateway",
      context_id: fleet.contextId,
      runner_id: fleet.runnerId,
      capacity: 2,
    });
    expect(info.streams).toEqual(
      expect.arrayContaining([expect.objectContaining({ name: names.jobsStream, subjects: [names.jobsFilter] })]),
    );
    expect(await (await fetch(new URL("info", ops))).json()).toMatchObject({ mode: "worker", slots: 2, running: 0 });
  });

  it("sets the fleet up idempotently, updates what may change and names what may not", async () => {
    const names = fleetNames({ contextId: 990_001, runnerId: 1 });
    const nc = await connect({ servers: stack.nats().url });
    try {
      await ensureFleet(nc, names, DEFAULT_FLEET_SETUP);
      await ensureFleet(nc, names, DEFAULT_FLEET_SETUP);
      const jsm = await jetstreamManager(nc);
      const before = await jsm.consumers.info(names.jobsStream, names.workersConsumer);
      await ensureFleet(nc, names, { ...DEFAULT_FLEET_SETUP, ackWaitSeconds: 7 });
      const after = await jsm.consumers.info(names.jobsStream, names.workersConsumer);
      expect(after.created).toBe(before.created);
      expect(after.config).toMatchObject({ ack_wait: 7_000_000_000, max_ack_pending: 1000, max_deliver: -1 });
      const other = fleetNames({ contextId: 990_002, runnerId: 1 });
      await jsm.streams.add({ name: other.jobsStream, subjects: [other.jobsFilter] });
      await expect(ensureFleet(nc, other, DEFAULT_FLEET_SETUP)).rejects.toThrow(
        new RegExp(`stream ${other.jobsStream} exists with retention limits, not workqueue`),
      );
    } finally {
      await nc.close();
    }
  });
});
