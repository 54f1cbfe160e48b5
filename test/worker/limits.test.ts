import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import { failure, signed, testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// A context's limits through the real API: setting and lifting them (validated, admins only),
// the flow-start throttle's 429 with Retry-After on submit and on start, a retry under an
// Idempotency-Key that is not charged twice, and pull leases from many requests at once that
// never take more than the runner's concurrency or the context's max_inflight.

const w = testWorker("limits");
afterAll(() => w.cleanup());

let admin: Awaited<ReturnType<typeof w.newActor>>;
let client: CoordinatorClient;

beforeAll(async () => {
  admin = await w.newActor();
  client = admin.client;
});

const sh = (name: string) => ({ name, script: `echo ${name}`, script_type: "sh" as const });

describe("context limits", () => {
  it("sets, shows and lifts limits; refuses bad values naming the field, and non-admins", async () => {
    const ctx = (await client.createContext()).id;
    const set = await client.setLimits(ctx, { max_inflight: 5, flow_starts_per_minute: 30 });
    expect(set).toMatchObject({ max_inflight: 5, flow_starts_per_minute: 30 });
    // An absent limit stays; null lifts one.
    const partly = await client.setLimits(ctx, { max_inflight: null });
    expect(partly.max_inflight).toBeUndefined();
    expect(partly.flow_starts_per_minute).toBe(30);
    expect((await client.loadContext(ctx)).flow_starts_per_minute).toBe(30);

    const zero = await failure(client.setLimits(ctx, { max_inflight: 0 }));
    expect(zero.status).toBe(400);
    expect(zero.problem.field).toBe("body.max_inflight");
    const unknown = await failure(client.setLimits(ctx, { most: 3 } as never));
    expect(unknown.status).toBe(400);

    const reader = await w.newActor();
    await client.grant(ctx, "readers", reader.actor.id);
    const forbidden = await failure(reader.client.setLimits(ctx, { max_inflight: 1 }));
    expect(forbidden.status).toBe(403);
  });

  it("does not let a replayed submission take a flow start", async () => {
    const ctx = (await client.createContext()).id;
    await client.setLimits(ctx, { flow_starts_per_minute: 2 });
    const request = await signed("POST", `/v1/contexts/${ctx}/flows`, admin.jwk, actorKeyId(admin.actor.id), {
      start: true,
      jobs: [sh("once")],
    });
    const replay = request.clone();
    expect((await w.fetch(request)).status).toBe(201);
    const replayed = await w.fetch(replay);
    expect(replayed.status).toBe(401);
    expect(await replayed.json()).toMatchObject({ type: "/problems/nonce-replayed" });
    // The minute's second start is still there.
    await client.submitFlow(ctx, { start: true, jobs: [sh("second")] });
    expect((await client.listFlows(ctx)).total).toBe(2);
  });

  it("refuses a flow start past flow_starts_per_minute with 429 and Retry-After, and creates nothing", async () => {
    const ctx = (await client.createContext()).id;
    await client.setLimits(ctx, { flow_starts_per_minute: 3 });
    for (let i = 0; i < 3; i++) await client.submitFlow(ctx, { start: true, jobs: [sh(`a${i}`)] });
    const before = (await client.listFlows(ctx)).total;

    const response = await w.fetch(
      await signed("POST", `/v1/contexts/${ctx}/flows`, admin.jwk, actorKeyId(admin.actor.id), {
        start: true,
        jobs: [sh("over")],
      }),
    );
    expect(response.status).toBe(429);
    expect(response.headers.get("content-type")).toBe("application/problem+json");
    const retryAfter = Number(response.headers.get("retry-after"));
    // A third of the minute's budget comes back every 20 s.
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(20);
    const problem = (await response.json()) as { type: string; limit: number; retry_after_ms: number };
    expect(problem.type).toBe("/problems/flow-starts-throttled");
    expect(problem.limit).toBe(3);
    expect(problem.retry_after_ms).toBeGreaterThan(0);
    expect((await client.listFlows(ctx)).total).toBe(before);

    // Submitting without starting is not a start; starting it is, and is refused the same way.
    const created = await client.submitFlow(ctx, { jobs: [sh("later")] });
    expect(created.status).toBe("dispatched");
    const start = await failure(client.startFlow(ctx, created.id));
    expect(start.status).toBe(429);
    expect(start.code).toBe("flow-starts-throttled");
    expect((await client.loadFlow(ctx, created.id)).status).toBe("dispatched");

    // Lifting the limit lets starts through again.
    await client.setLimits(ctx, { flow_starts_per_minute: null });
    expect((await client.startFlow(ctx, created.id)).status).toBe("started");
  });

  it("does not charge a retry under the same Idempotency-Key twice", async () => {
    const ctx = (await client.createContext()).id;
    await client.setLimits(ctx, { flow_starts_per_minute: 1 });
    const body = { start: true, jobs: [sh("once")] };
    const first = await client.submitFlow(ctx, body, { idempotencyKey: "retry-me" });
    const again = await client.submitFlow(ctx, body, { idempotencyKey: "retry-me" });
    expect(again.id).toBe(first.id);
    const other = await failure(client.submitFlow(ctx, { start: true, jobs: [sh("two")] }));
    expect(other.status).toBe(429);
  });

  it("never leases more than the runner's concurrency or the context's max_inflight, however many leases come at once", async () => {
    const ctx = (await client.createContext()).id;
    const runner = await PullRunner.register(w, client, ctx, ["sh"], 6);
    await client.submitFlow(ctx, { start: true, jobs: Array.from({ length: 20 }, (_, i) => sh(`j${i}`)) });
    const capped = await client.submitFlow(ctx, {
      start: true,
      max_parallel: 1,
      jobs: Array.from({ length: 5 }, (_, i) => sh(`c${i}`)),
    });
    const leased = (await Promise.all(Array.from({ length: 20 }, () => runner.lease(3)))).flat();
    expect(leased).toHaveLength(6);
    expect(leased.filter((d) => d.flow_id === capped.id)).toHaveLength(1);
    // Its other jobs say why they wait: the flow's own cap, not the busy runner.
    const waits = (await client.loadFlow(ctx, capped.id)).jobs.flatMap((j) => (j.waiting ? [j.waiting.reason] : []));
    expect(waits).toEqual(["flow-limit", "flow-limit", "flow-limit", "flow-limit"]);

    await client.setLimits(ctx, { max_inflight: 7 });
    for (const d of leased) await runner.finish(d, {});
    const next = (await Promise.all(Array.from({ length: 20 }, () => runner.lease(3)))).flat();
    expect(next).toHaveLength(6);
    // A second runner may hold only what the context's cap leaves: 7 in all.
    const other = await PullRunner.register(w, client, ctx, ["sh"], 6);
    const more = (await Promise.all(Array.from({ length: 10 }, () => other.lease(3)))).flat();
    expect(more).toHaveLength(1);
    const held = await client.loadFlow(ctx, capped.id);
    expect(held.jobs.find((j) => j.waiting)?.waiting?.reason).toBe("context-limit");
  });
});
