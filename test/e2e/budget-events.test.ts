import { describe, expect, it } from "vitest";
import { flowEnd } from "../support/flow-runs.js";
import { commandDelta } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// What waits and events cost, counted where it happens: Redis's own command counts (INFO
// commandstats: a script call and each command inside it), once Redis went quiet. Budgets
// (docs/flows.md, "Cost"): a plain flow's do not move (budget-sent.test.ts); an event matching
// nothing, an event ending a wait, and a wait's start each cost a fixed number of commands, and
// matching does not grow with the waits and flows of the context.

// No cron: a sweep in the middle would be counted too.
const { stack, admin } = usePrivateStack("budget-events", { cron: false });

/**
 * An event matching nothing: the nonce's SET, the sendEvent script (EVALSHA, GET, ZRANGE, ZCARD,
 * SET). Every count here leaves out the key epoch's read (`counted`).
 */
const EVENT_MATCHING_NOTHING = 6;
/**
 * An event ending one wait, the flow's last job: the above, and the flow's commit (measured 19 in
 * all: the job's record, the index's ZREM, and the flow's end with its result mail).
 */
const EVENT_ENDING_A_WAIT = 20;
/**
 * What one event costs per wait it resumes, each its flow's last job, past the 6 of the event
 * itself: that flow's commit (measured 12 a wait for 5 waits of 5 flows: the job's record, the
 * index's ZREM, the flow's end and its result mail; 13 for one alone, whose object also read its
 * record's token after a quiet second). One event resuming several waits pays it once for each.
 */
const PER_WAIT_RESUMED = 14;
/** What keeping events for later waits (`event_lookback`) adds to an event sent: ZADD, ZREMRANGEBYSCORE, ZREMRANGEBYRANK, PEXPIRE. */
const KEPT_EVENT_EXTRA = 4;
/**
 * A wait ended by its timeout (on_timeout: skip), its flow's last job: the flow's commit on its
 * alarm, and what an object woken after a quiet spell reads first (measured 15).
 */
const WAIT_TIMED_OUT = 16;

/**
 * The commands Redis ran for `work`, counted once it went quiet before and after; `own` leaves
 * out the key epoch's read (MGET), which an isolate makes at most once a second, whatever the work.
 */
async function counted(
  work: () => Promise<unknown>,
): Promise<{ total: number; own: number; byCommand: Record<string, number> }> {
  const before = await stack().quietCommandStats();
  await work();
  const delta = commandDelta(before, await stack().quietCommandStats());
  return { ...delta, own: delta.total - (delta.byCommand.mget ?? 0) };
}

const waitFlow = (key: string) => ({
  start: true,
  jobs: [{ name: "approval", wait: { event: "order.paid", key, timeout: 600 } }],
});

describe("budget: waits and events", () => {
  let ctx: number;

  it(`sends an event that matches nothing in ${EVENT_MATCHING_NOTHING} commands, however many waits the context has`, async () => {
    ctx = (await admin().client.createContext()).id;
    // Warm up: scripts loaded, the context in the isolate's cache.
    await admin().client.sendEvent(ctx, { name: "order.paid", key: "warm" });
    const alone = await counted(() => admin().client.sendEvent(ctx, { name: "order.paid", key: "none" }));
    // 200 waits in 200 flows of the context, on other keys.
    await Promise.all(Array.from({ length: 200 }, (_, i) => admin().client.submitFlow(ctx, waitFlow(`other-${i}`))));
    const crowded = await counted(() => admin().client.sendEvent(ctx, { name: "order.paid", key: "none" }));
    console.log(
      `budget: an event matching nothing: ${alone.total} commands (${JSON.stringify(alone.byCommand)}), with 200 waits in the context ${crowded.total} (${JSON.stringify(crowded.byCommand)})`,
    );
    expect(alone.own).toBeLessThanOrEqual(EVENT_MATCHING_NOTHING);
    // The same commands, the isolate's caches aside (the key epoch, read at most once a second).
    const { mget: _a, ...aloneOwn } = alone.byCommand;
    const { mget: _c, ...crowdedOwn } = crowded.byCommand;
    expect(crowdedOwn).toEqual(aloneOwn);
  });

  it(`ends a wait with an event in at most ${EVENT_ENDING_A_WAIT} commands, a wait's start costing 2 more than a sleep's (its index entry and the look back)`, async () => {
    const warm = await admin().client.submitFlow(ctx, waitFlow("warm-wait"));
    await admin().client.sendEvent(ctx, { name: "order.paid", key: "warm-wait" });
    await flowEnd(admin().client, ctx, warm.id);

    const started = await counted(() => admin().client.submitFlow(ctx, waitFlow("k1")));
    const plain = await counted(() =>
      admin().client.submitFlow(ctx, { start: true, jobs: [{ name: "nap", sleep: 600 }] }),
    );
    console.log(
      `budget: a flow of one wait created and started: ${started.total} commands (${JSON.stringify(started.byCommand)}); of one sleep: ${plain.total} (${JSON.stringify(plain.byCommand)})`,
    );
    // The wait's index entry (a ZADD in the creation's script) and the look back for kept events (a ZRANGE).
    expect(started.own - plain.own).toBeLessThanOrEqual(2);

    const ended = await counted(async () => {
      const sent = await admin().client.sendEvent(ctx, {
        id: "pay-k1",
        name: "order.paid",
        key: "k1",
        data: { n: "1" },
      });
      expect(sent).toMatchObject({ matched: 1, resumed: 1 });
    });
    console.log(
      `budget: an event ending one wait (and its flow): ${ended.total} commands (${JSON.stringify(ended.byCommand)})`,
    );
    expect(ended.own).toBeLessThanOrEqual(EVENT_ENDING_A_WAIT);
  });

  it(`resumes 5 waits of 5 flows with one event in ${EVENT_MATCHING_NOTHING} + 5 × ${PER_WAIT_RESUMED} commands at most`, async () => {
    const flows = await Promise.all(Array.from({ length: 5 }, () => admin().client.submitFlow(ctx, waitFlow("many"))));
    const ended = await counted(async () => {
      const sent = await admin().client.sendEvent(ctx, { id: "many-1", name: "order.paid", key: "many" });
      expect(sent).toMatchObject({ matched: 5, resumed: 5 });
    });
    const perWait = (ended.own - EVENT_MATCHING_NOTHING) / flows.length;
    console.log(
      `budget: an event resuming 5 waits: ${ended.total} commands (${JSON.stringify(ended.byCommand)}), ${perWait} per wait past the event's own`,
    );
    expect(perWait).toBeLessThanOrEqual(PER_WAIT_RESUMED);
    for (const flow of flows) expect((await flowEnd(admin().client, ctx, flow.id)).status).toBe("finished");
  });

  it(`ends a wait on its timeout in at most ${WAIT_TIMED_OUT} commands, the flow's commit on its alarm`, async () => {
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "approval", wait: { event: "order.paid", key: "never", timeout: 2, on_timeout: "skip" } }],
    });
    // Only the alarm works meanwhile: nobody reads the flow until it is counted.
    const timedOut = await counted(() => new Promise((r) => setTimeout(r, 3_500)));
    console.log(
      `budget: a wait ended by its timeout: ${timedOut.total} commands (${JSON.stringify(timedOut.byCommand)})`,
    );
    expect(timedOut.own).toBeLessThanOrEqual(WAIT_TIMED_OUT);
    expect(await flowEnd(admin().client, ctx, flow.id)).toMatchObject({
      status: "finished",
      skipped: { approval: expect.stringContaining("timed out") },
    });
  });

  it(`pays ${KEPT_EVENT_EXTRA} commands more per event sent in a context that keeps events (event_lookback)`, async () => {
    const keeping = (await admin().client.createContext()).id;
    await admin().client.setLimits(keeping, { event_lookback: 600 });
    await admin().client.sendEvent(keeping, { name: "order.paid", key: "warm" });
    const kept = await counted(() => admin().client.sendEvent(keeping, { name: "order.paid", key: "none" }));
    console.log(`budget: an event kept for later waits: ${kept.total} commands (${JSON.stringify(kept.byCommand)})`);
    expect(kept.own).toBeLessThanOrEqual(EVENT_MATCHING_NOTHING + KEPT_EVENT_EXTRA);
  });
});
