import path from "node:path";
import { jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { fleetNames, type FleetNames } from "../../runner/fleet/names.js";
import { importPrivateKey, keyThumbprint, parsePrivateJwk, signRequest } from "../../shared/auth/index.js";
import { eventually } from "../support/eventually.js";
import { loggedJobs as jobs, runsIn as runs, useFleetStack, type RegisteredFleet } from "../support/fleet.js";
import type { RunnerProcess } from "../support/runner-process.js";
import { flowEnd } from "../support/flow-runs.js";
import { sleep } from "../../shared/client/index.js";
import { readTestStackConfig } from "../support/stack-config.js";

/**
 * The fleet under the faults an operator gets paged for: a job that kills its worker (its dead
 * letter must not take the jobs that ran beside it), the work stream after a worker kill and a
 * NATS crash (nothing acknowledged may stay in it; a SIGKILL is what leaves such messages), drains
 * that must end the process in every mode, however long its jobs run, and a delivery the
 * coordinator sends again, which must not run twice, even once NATS has forgotten it.
 */

const stack = useFleetStack("fleet-chaos");
const { tmp, fleetIn } = stack;
const admin = () => stack.admin();
const logOf = (contextId: number) => path.join(tmp, `chaos-runs-${contextId}.log`);

/** Reads the fleet's streams and consumers from NATS itself, on a connection of its own. */
async function fromNats<T>(
  fleet: RegisteredFleet,
  read: (jsm: JetStreamManager, names: FleetNames) => Promise<T>,
): Promise<T> {
  const nc = await connect({ servers: stack.nats().url });
  try {
    return await read(await jetstreamManager(nc), fleetNames({ contextId: fleet.contextId, runnerId: fleet.runnerId }));
  } finally {
    await nc.close();
  }
}

/** The fleet's work stream: its messages, last sequence, and its first message. */
function workStream(fleet: RegisteredFleet): Promise<{ messages: number; lastSeq: number; first?: unknown }> {
  return fromNats(fleet, async (jsm, names) => {
    const { state } = await jsm.streams.info(names.jobsStream);
    const first =
      state.messages > 0 ? await jsm.streams.getMessage(names.jobsStream, { seq: state.first_seq }) : undefined;
    return { messages: state.messages, lastSeq: state.last_seq, ...(first ? { first: first.json() } : {}) };
  });
}

const workStreamMessages = async (fleet: RegisteredFleet) => (await workStream(fleet)).messages;

/** The workers' consumer's job messages given out or waiting (not acknowledged). */
function workersPending(fleet: RegisteredFleet): Promise<number> {
  return fromNats(fleet, async (jsm, names) => {
    const info = await jsm.consumers.info(names.jobsStream, names.workersConsumer);
    return info.num_pending + info.num_ack_pending;
  });
}

/** POSTs `delivery` to the gateway signed as the coordinator signs (the test stack's key). */
async function deliverAgain(fleet: RegisteredFleet, delivery: unknown): Promise<Response> {
  const jwk = parsePrivateJwk(readTestStackConfig().coordinatorKey, "the coordinator key");
  const request = new Request(fleet.address, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(delivery),
  });
  return fetch(await signRequest(request, { keyid: await keyThumbprint(jwk.x), key: await importPrivateKey(jwk) }));
}

/**
 * A combined member started with `--drain-timeout 3`, given a 600 s job and drained by a signed
 * POST /admin/drain: it exits 0 within 20 s, saying the drain timed out, and the job stopped at
 * the timeout is `error` in the coordinator (its report relayed before the exit).
 */
async function drainsPastTimeout(fleet: RegisteredFleet, member: RunnerProcess): Promise<void> {
  await member.waitForLine(/fleet worker \S+ of runner \d+ .* taking jobs/, 30_000);
  const log = logOf(fleet.contextId);
  const flow = await admin().submitFlow(fleet.contextId, jobs(1, log, 600));
  await eventually(() => (runs(log).size >= 1 ? true : undefined), 20_000);
  const began = Date.now();
  expect((await fleet.drain(fleet.address)).status).toBe(202);
  expect(await member.exited).toEqual({ code: 0, signal: null });
  expect(Date.now() - began).toBeLessThan(20_000);
  expect(member.output()).toMatch(/drain timed out after 3 s/);
  expect((await admin().loadFlow(fleet.contextId, flow.id)).jobs.map((j) => j.status)).toEqual(["error"]);
}

describe("a runner fleet under chaos", () => {
  it("dead-letters a job that kills its worker, and only it: the jobs that ran beside it finish", async () => {
    // Registered with 3 slots, so the coordinator sends all three jobs at once.
    const fleet = await fleetIn(3);
    await fleet.gateway(["--ack-wait", "2"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, {
      ...jobs(2, log, 6),
      jobs: [
        ...jobs(2, log, 6).jobs,
        {
          name: "poison",
          script_type: "sh",
          // Kills the worker that runs it (its parent) once both others run beside it there (their
          // lines in the log name this worker's folder), or after 3 s when they do not come.
          script: [
            'here="$(dirname "$PWD")"',
            'echo "poison $here" >> "$RUN_LOG"',
            "i=0",
            'while [ "$(grep -c " $here\\$" "$RUN_LOG")" -lt 3 ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done',
            "kill -9 $PPID",
            "sleep 5",
          ].join("\n"),
        },
      ],
    });
    // One worker at a time, started again whenever the poison killed it.
    const workerArgs = ["--concurrency", "3", "--ack-wait", "2", "--max-deliver", "2"];
    let ended = false;
    // The flow fails with the poison's dead letter; the others run on to their own ends.
    const end = eventually(
      async () => {
        const view = await admin().loadFlow(fleet.contextId, flow.id);
        return view.jobs.every((j) => j.status === "finished" || j.status === "error") ? view : undefined;
      },
      120_000,
      500,
    ).finally(() => (ended = true));
    let deaths = 0;
    while (!ended) {
      const worker = await fleet.worker(workerArgs);
      const exit = await Promise.race([worker.proc.exited, end.then(() => undefined)]);
      if (exit) deaths++;
    }
    const view = await end;
    const byName = Object.fromEntries(view.jobs.map((j) => [j.key, j]));
    expect(byName.poison?.status).toBe("error");
    expect(byName.poison?.error).toMatch(/dead letter: .*poison.* started 2 times alone/);
    expect(byName.j0?.status, JSON.stringify(byName.j0)).toBe("finished");
    expect(byName.j1?.status, JSON.stringify(byName.j1)).toBe("finished");
    // Its first run killed the worker with the others beside it; then it ran alone until its limit.
    // The others died with it there, and ran again (alone, as suspects) to the end.
    const ran = runs(log);
    for (const sibling of ["j0", "j1"]) {
      expect(ran.get(sibling)?.[0]).toBe(ran.get("poison")?.[0]);
      expect(ran.get(sibling)?.length).toBeGreaterThanOrEqual(2);
    }
    expect(deaths).toBeGreaterThanOrEqual(3);
    expect(ran.get("poison")).toHaveLength(3);
  });

  it("leaves nothing acknowledged in the work stream after a worker is killed and NATS crashes", async () => {
    const fleet = await fleetIn(4);
    const gateway = await fleet.gateway(["--ack-wait", "3"]);
    const a = await fleet.worker(["--concurrency", "2", "--ack-wait", "3"]);
    await fleet.worker(["--concurrency", "2", "--ack-wait", "3"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(16, log, 0.5, 1));
    await eventually(() => (runs(log).size >= 3 ? true : undefined), 20_000);
    await a.proc.kill();
    await fleet.worker(["--concurrency", "2", "--ack-wait", "3"]);
    expect((await flowEnd(admin(), fleet.contextId, flow.id, 120_000)).status).toBe("finished");
    await eventually(async () => ((await workStreamMessages(fleet)) === 0 ? true : undefined), 30_000);

    // Three short jobs beside a long one, all stored at once. Once the short ones are acknowledged,
    // NATS is killed: nats-server 2.9 has written the consumer's acks by then, but not the
    // removals of messages from a stream block that still holds one (the long job's), so it comes
    // back with acknowledged messages that no worker will ever be given.
    const log2 = logOf(fleet.contextId) + ".2";
    const short = jobs(3, log2, 0.3).jobs;
    const flow2 = await admin().submitFlow(fleet.contextId, {
      ...jobs(0, log2, 0),
      jobs: [...short, { ...short[0]!, name: "long", script: short[0]!.script!.replace("sleep 0.3", "sleep 8") }],
    });
    await eventually(async () => ((await workersPending(fleet)) === 1 ? true : undefined), 30_000, 50);
    await sleep(300);
    await stack.nats().crash();
    // The long job's message, and the short ones' if NATS kept them. Most runs it does; under load
    // it has sometimes written the removals before the kill (CI saw one such run), and then there
    // is nothing for the gateway to remove: the promise (an empty stream) is checked either way.
    const kept = (await workStreamMessages(fleet)) - 1;
    expect((await flowEnd(admin(), fleet.contextId, flow2.id, 120_000)).status).toBe("finished");
    // The gateway removes them (every 10 s) once they are below the ack floor, and says so.
    await eventually(async () => ((await workStreamMessages(fleet)) === 0 ? true : undefined), 30_000);
    if (kept === 0) return console.log("NATS kept no acknowledged message this run: nothing to remove");
    const metrics = await (await fetch(new URL("metrics", fleet.address))).text();
    expect(metrics).toMatch(/^fleet_acknowledged_removed_total [1-9]\d*$/m);
    expect(gateway.output()).toMatch(/removed \d+ acknowledged job message\(s\) NATS kept/);
  });

  it("ends a combined process's drain: its jobs finish and report, and it exits 0", async () => {
    const fleet = await fleetIn(2);
    const both = await fleet.gateway(["--mode", "combined", "--concurrency", "2"]);
    await both.waitForLine(/fleet worker \S+ of runner \d+ .* taking jobs/, 10_000);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(2, log, 2));
    await eventually(() => (runs(log).size >= 2 ? true : undefined), 20_000);
    expect((await fleet.drain(fleet.address)).status).toBe(202);
    expect((await both.exited).code).toBe(0);
    expect(both.output()).toMatch(/drained/);
    // The jobs that ran during the drain reported before it exited.
    const view = await admin().loadFlow(fleet.contextId, flow.id);
    expect(view.jobs.map((j) => j.status)).toEqual(["finished", "finished"]);
  });

  it("ends a drain within --drain-timeout in every mode, even with a job that runs for minutes", async () => {
    const fleet = await fleetIn(2);
    const gateway = await fleet.gateway(["--drain-timeout", "3"]);
    const worker = await fleet.worker(["--concurrency", "1", "--drain-timeout", "3"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(1, log, 600));
    await eventually(() => (runs(log).size >= 1 ? true : undefined), 20_000);
    const began = Date.now();
    expect((await fleet.drain(worker.ops)).status).toBe(202);
    expect((await worker.proc.exited).code).toBe(0);
    expect(worker.proc.output()).toMatch(/drain timed out after 3 s/);
    expect((await fleet.drain(fleet.address)).status).toBe(202);
    expect((await gateway.exited).code).toBe(0);
    expect(Date.now() - began).toBeLessThan(30_000);
    // The job stopped at the timeout reported its error, relayed before the gateway exited.
    expect((await admin().loadFlow(fleet.contextId, flow.id)).jobs.map((j) => j.status)).toEqual(["error"]);

    // Combined: the worker's jobs are stopped at the timeout, their errors relayed, and it exits.
    const both = await fleetIn(2);
    await drainsPastTimeout(
      both,
      await both.gateway(["--mode", "combined", "--concurrency", "1", "--drain-timeout", "3"]),
    );
  });

  it("ends `flowc runner start --mode combined` on a signed /admin/drain within --drain-timeout", async () => {
    const fleet = await fleetIn(1);
    const flowc = fleet.flowcStart([
      "--mode",
      "combined",
      "--listen",
      `127.0.0.1:${fleet.port}`,
      "--concurrency",
      "1",
      "--work-dir",
      path.join(tmp, `flowc-work-${fleet.contextId}`),
      "--drain-timeout",
      "3",
    ]);
    // flowc exits with its runner's code, once the drain timed out and the job's error was relayed.
    await drainsPastTimeout(fleet, flowc);
  });

  it("runs a repeated delivery once: the gateway drops it while the job runs, after it ended, and after NATS restarted", async () => {
    const fleet = await fleetIn(1);
    const gateway = await fleet.gateway();
    await fleet.worker(["--concurrency", "1"]);
    const log = logOf(fleet.contextId);
    const flow = await admin().submitFlow(fleet.contextId, jobs(1, log, 3));
    await eventually(() => runs(log).get("j0"), 20_000);
    // The delivery as the gateway stored it: the coordinator sends the same attempt again when
    // the first POST's answer was lost.
    const { first: delivery } = await workStream(fleet);
    expect(delivery).toMatchObject({ context_id: fleet.contextId, attempt: 1 });
    const whileRunning = await deliverAgain(fleet, delivery);
    expect(whileRunning.status).toBe(200);
    expect(await whileRunning.json()).toHaveProperty("duplicate");
    expect((await flowEnd(admin(), fleet.contextId, flow.id, 60_000)).status).toBe("finished");
    // A NATS restart forgets the dedupe ids of messages no longer in the stream: JetStream alone
    // would store this one again. The gateway remembers it, and stores nothing.
    await stack.nats().restart();
    await eventually(() => (/NATS connection back/.test(gateway.output()) ? true : undefined), 20_000);
    const before = await workStream(fleet);
    const afterRestart = await deliverAgain(fleet, delivery);
    expect(afterRestart.status).toBe(200);
    expect(await afterRestart.json()).toHaveProperty("duplicate");
    expect(await workStream(fleet)).toEqual({ messages: 0, lastSeq: before.lastSeq });
    expect(runs(log).get("j0")).toHaveLength(1);
    const metrics = await (await fetch(new URL("metrics", fleet.address))).text();
    expect(metrics).toMatch(/^fleet_deliveries_total\{outcome="duplicate"\} 2$/m);
    expect((await admin().loadFlow(fleet.contextId, flow.id)).jobs.map((j) => j.status)).toEqual(["finished"]);
  });
});
