import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "../support/eventually.js";
import { DirectRedis } from "../support/redis-direct.js";
import { projectScripts } from "../support/script-audit.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// What a push runner that is down costs its context in storage, on the real stack (redis-server,
// the REST endpoint, wrangler dev; the runner registered at an address where nothing listens).
// Deliveries are tried only while work waits for the runner: each failure backs it off (1 s,
// doubling to 30 s, with jitter: functions/dispatch/backoff.ts), so once backed off it is tried at
// most 4 times a minute. Counted where commands leave the REST endpoint: what one try costs, and
// that a down runner with no work costs nothing. No cron: a sweep would be counted too.

const { stack, admin, submit } = usePrivateStack("runner-down", { cron: false });

/** Issue 36: the most commands one delivery tried to a down runner may cost its context (measured: 8). */
const SENT_PER_TRY = 10;
/** The most tries a minute once the backoff reached its 30 s ceiling (drawn between 15 and 30 s). */
const TRIES_PER_MINUTE = 4;

let direct: DirectRedis;
beforeAll(async () => {
  direct = await DirectRedis.open(stack().redisUrl);
});
afterAll(() => direct?.close());

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The runner's health as the Dispatcher mirrors it to Redis (read directly: not counted). */
async function health(contextId: number, runnerId: number): Promise<{ failures: number; retry_at: number } | null> {
  const raw = (await direct.call("HGET", stack().keys.runnerHealth(contextId), String(runnerId))) as string | null;
  return raw === null ? null : (JSON.parse(raw) as { failures: number; retry_at: number });
}

/** Waits until the runner's failures reach `n`; returns the commands sent so far then. */
async function failuresReach(contextId: number, runnerId: number, n: number): Promise<number> {
  await eventually(
    async () => (((await health(contextId, runnerId))?.failures ?? 0) >= n ? true : undefined),
    60_000,
    20,
    `${n} failed deliveries`,
  );
  return stack().restSent().commands;
}

describe("a push runner that is down", () => {
  it(`costs at most ${SENT_PER_TRY} commands sent a delivery tried while work waits, and nothing once idle`, async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerTestRunner(admin().client, ctx); // never started: nothing listens
    const flow = await submit(ctx, {
      jobs: [{ name: "waits", script: "true", script_type: "sh" }],
      timeouts: { timeout_ack: 600 }, // not failed for the missing acknowledgement while this test counts
    });
    // From the second failure to the fifth: three tries (backoffs of at most 2, 4 and 8 s).
    const tries = 3;
    const from = await failuresReach(ctx, runner.id, 2);
    const record = stack().restRecord();
    const to = await failuresReach(ctx, runner.id, 2 + tries);
    const perTry = (to - from) / tries;
    const scripts = await projectScripts();
    const byCommand: Record<string, number> = {};
    for (const command of record().flat()) {
      const name = command.startsWith("EVALSHA ") ? (scripts.get(command.slice(8)) ?? command) : command;
      byCommand[name] = (byCommand[name] ?? 0) + 1;
    }
    console.log(
      `a down runner with one job waiting: ${to - from} commands sent over ${tries} tries = ${perTry} a try: ` +
        JSON.stringify(byCommand),
    );
    expect(perTry).toBeLessThanOrEqual(SENT_PER_TRY);

    // The work goes (cancelled): once the backoff's last alarm rang, nothing more is sent.
    await admin().client.cancelFlow(ctx, flow.id);
    const last = await health(ctx, runner.id);
    await pause(Math.max(0, (last?.retry_at ?? 0) - Date.now()) + 2_000);
    const before = stack().restSent().commands;
    await pause(10_000);
    const idle = stack().restSent().commands - before;
    console.log(
      `the same runner, down, its context idle: ${idle} commands sent in 10 s; bound with work waiting: ` +
        `${SENT_PER_TRY * TRIES_PER_MINUTE} a minute a runner`,
    );
    expect(idle).toBe(0);
  }, 120_000);
});
