import { describe, expect, it } from "vitest";
import { generateKeyPair, runnerKeyId } from "../../shared/auth/index.js";
import { ApiError, signerFromJwk } from "../../shared/client/index.js";
import type { DeadLetter, DeliveryPayload } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { answersIn, attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { storedResults } from "../support/stored-results.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Runners failing in the ways real ones do, against real processes (redis-server, the REST
// endpoint, workerd under `wrangler dev`, runner processes): killed mid-job, never acknowledging,
// acknowledging and then silent, reporting after their lease ran out. In every case no job is
// lost, none runs more than `retries + 1` times (counted at the runners), and the final state is
// right.

const { stack, admin, submit } = usePrivateStack("faults-runners");

/** Short leases and backoffs, so that each case takes seconds. */
const FAST = { timeout_ack: 2, timeout_result: 2, retry_base_ms: 50, retry_cap_ms: 200 };

async function deadLetters(contextId: number): Promise<DeadLetter[]> {
  return (await admin().client.listDeadLetters(contextId)).items;
}

/** The flow's results as stored (read from Redis, not from the flow's Durable Object). */
function stored(contextId: number, flowId: number) {
  return storedResults(stack(), contextId, admin().id, flowId);
}

describe("runner faults", () => {
  it("retries on the other runner a job whose runner was killed (SIGKILL) mid-job", async () => {
    const ctx = (await admin().client.createContext()).id;
    const registered = await Promise.all(
      [0, 1].map(() => stack().registerReferenceRunner(admin().client, ctx, "push", ["--heartbeat", "1"])),
    );
    const procs = await Promise.all(registered.map((r) => r.start()));
    const flow = await submit(ctx, {
      // A healthy attempt heartbeats every second: a lease of 3 s is never missed by one.
      timeouts: { ...FAST, timeout_result: 3 },
      jobs: [{ name: "slow", script_type: "sh", retries: 1, script: 'sleep 3; echo n=1 > "$RESULT_FILE"\n' }],
    });
    const first = await eventually(async () => {
      const i = procs.findIndex((p) => / start$/m.test(p.stdout()));
      return i >= 0 ? i : undefined;
    }, 20_000);
    const victim = procs[first];
    const survivor = procs[1 - first];
    if (!victim || !survivor) throw new Error("two runners expected");
    victim.child.kill("SIGKILL");
    expect(await victim.exited).toMatchObject({ signal: "SIGKILL" });

    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.result).toEqual({ slow: { n: "1" } });
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 2, runner_id: registered[1 - first]?.id });
    expect(attemptsOf(runsIn(victim.stdout()), flow.id)).toEqual({ slow: [1] });
    expect(attemptsOf(runsIn(survivor.stdout()), flow.id)).toEqual({ slow: [2] });
    expect(await stored(ctx, flow.id)).toEqual({ slow: { n: "1" } });
    expect((await deadLetters(ctx)).filter((l) => l.flow_id === flow.id && l.kind !== "payload")).toEqual([]);
  });

  it("retries a job a pull runner leased and never acknowledged, once timeout_ack passed", async () => {
    const ctx = (await admin().client.createContext()).id;
    const jwk = await generateKeyPair();
    const mute = await admin().client.createRunner(ctx, {
      pubkey: jwk.x,
      runner_type: "sh",
      local: true,
      script_types: ["sh"],
    });
    const asMute = stack().anonymous.as(await signerFromJwk(jwk, runnerKeyId(ctx, mute.id)));
    const lease = async () =>
      (
        (await asMute.request("POST", `/v1/contexts/${ctx}/runners/${mute.id}/lease`, { max: 10 })) as {
          deliveries: DeliveryPayload[];
        }
      ).deliveries;
    const flow = await submit(ctx, {
      timeouts: FAST,
      jobs: [{ name: "leased", script_type: "sh", retries: 1, script: 'echo n=2 > "$RESULT_FILE"\n' }],
    });
    const leased = await eventually(async () => {
      const got = await lease();
      return got.length > 0 ? got : undefined;
    }, 20_000);
    expect(leased.map((d) => d.attempt)).toEqual([1]);
    const leasedView = await admin().client.loadFlow(ctx, flow.id);
    expect(leasedView.status).toBe("started");
    expect(leasedView.jobs[0]).toMatchObject({ attempt: 1, runner_id: mute.id, delivery: "delivered" });

    // Another runner comes, the mute one never acknowledges: the retry is the newcomer's.
    const other = await stack().registerReferenceRunner(admin().client, ctx, "pull");
    const proc = await other.start();
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.result).toEqual({ leased: { n: "2" } });
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 2, runner_id: other.id });
    expect(attemptsOf(runsIn(proc.stdout()), flow.id)).toEqual({ leased: [2] });

    // The mute runner's acknowledgement, far too late, is refused; nothing else is left to lease.
    const [d] = leased as [DeliveryPayload];
    const late = await asMute
      .request("POST", new URL(d.callbacks.ack, stack().url).pathname, { attempt: d.attempt })
      .catch((e: unknown) => e);
    expect(late).toBeInstanceOf(ApiError);
    expect(late).toMatchObject({ status: 409, code: "stale-attempt" });
    expect(await lease()).toEqual([]);
    expect((await deadLetters(ctx)).filter((l) => l.flow_id === flow.id)).toEqual([]);
  });

  it("retries on another runner (avoid_runner_id) a job whose runner acknowledged it and went silent", async () => {
    const ctx = (await admin().client.createContext()).id;
    const silent = await stack().registerTestRunner(admin().client, ctx, { SILENT: "1" });
    // Registered but not up yet: the first attempt can only go to the silent runner.
    const other = await stack().registerTestRunner(admin().client, ctx);
    const ghost = await silent.start();
    const flow = await submit(ctx, {
      timeouts: FAST,
      jobs: [{ name: "ghosted", script: "true", script_type: "sh", retries: 1 }],
    });
    await ghost.waitForLine(new RegExp(`^ran ghosted flow ${flow.id} attempt 1 `));
    const proc = await other.start();

    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.result).toEqual({ ghosted: { job: "ghosted", attempt: "2" } });
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 2, runner_id: other.id });
    expect(attemptsOf(runsIn(ghost.output()), flow.id)).toEqual({ ghosted: [1] });
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ ghosted: [2] });
    expect(proc.output()).toMatch(new RegExp(`^ran ghosted flow ${flow.id} attempt 2 avoid ${silent.id}$`, "m"));
    expect(await stored(ctx, flow.id)).toEqual({ ghosted: { job: "ghosted", attempt: "2" } });
    expect((await deadLetters(ctx)).filter((l) => l.flow_id === flow.id)).toEqual([]);
  });

  it("refuses with 409 stale-attempt a result that arrives after its lease ran out, and keeps the retry's", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx, { LATE: "1" });
    const proc = await runner.start();
    const flow = await submit(ctx, {
      timeouts: FAST,
      jobs: [{ name: "tardy", script: "true", script_type: "sh", retries: 1 }],
    });

    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status, JSON.stringify(view)).toBe("finished");
    expect(view.result).toEqual({ tardy: { job: "tardy", attempt: "2" } });
    expect(view.jobs[0]).toMatchObject({ status: "finished", attempt: 2, runner_id: runner.id });
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ tardy: [1, 2] });
    // The first attempt's result came while the second attempt ran: refused, and only then the second's.
    const answers = await answersIn(proc, `answered result tardy flow ${flow.id} `, 2);
    expect(answers).toEqual([
      `answered result tardy flow ${flow.id} attempt 1 409 stale-attempt`,
      `answered result tardy flow ${flow.id} attempt 2 200 applied`,
    ]);
    expect(await stored(ctx, flow.id)).toEqual({ tardy: { job: "tardy", attempt: "2" } });
    expect((await deadLetters(ctx)).filter((l) => l.flow_id === flow.id)).toEqual([]);
  });
});
