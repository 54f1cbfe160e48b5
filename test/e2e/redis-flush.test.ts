import { describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import type { ContextStreamEvent, FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { flowEnd } from "../support/flow-runs.js";
import type { TestRunnerProcess } from "../support/private-stack.js";
import { parsed, readSse } from "../support/streams.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Redis flushed under Durable Objects that keep their storage: every flow's object still holds
// the journal, stream, nonces and feed cursor of flows Redis no longer has. The actor, context
// and runner come back with the same ids, new flows get the old flows' ids, and each must run
// clean: its own jobs only, its stream from seq 1, and its events in the context's feed (whose
// per-flow cursor would otherwise skip them as seen). One flow is created at an object that holds
// the old flow in memory, the other after a restart of the Worker (at an object with storage only).

const { stack, admin } = usePrivateStack("redis-flush");

type FeedEvent = Extract<ContextStreamEvent, { flow_id: number }>;

const job = (name: string, depends: string[] = []) => ({ name, script: "true", script_type: "sh" as const, depends });

const signer = () => signerFromJwk(admin().jwk, actorKeyId(admin().id));

/** A flow's own stream from its first event, until its end. */
async function streamOf(ctx: number, flowId: number): Promise<FlowStreamEvent[]> {
  const read = await readSse(`${stack().url}/v1/contexts/${ctx}/flows/${flowId}/events?since=0`, await signer(), (e) =>
    parsed<FlowStreamEvent>(e).some((x) => x.type === "flow.finished" || x.type === "flow.error"),
  );
  return parsed<FlowStreamEvent>(read.events);
}

/** Checks a finished flow ran exactly `names`, and its stream tells only that from seq 1. */
async function expectRanClean(ctx: number, view: FlowView, names: string[]): Promise<void> {
  expect(view.status).toBe("finished");
  expect(view.jobs.map((j) => [j.key, j.status, j.attempt])).toEqual(names.map((n) => [n, "finished", 1]));
  expect(Object.keys(view.result).sort()).toEqual([...names].sort());
  const events = await streamOf(ctx, view.id);
  expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
  expect(events.filter((e) => e.type === "flow.created")).toHaveLength(1);
  expect(events[0]?.type).toBe("flow.created");
  const ids = new Set(view.jobs.map((j) => j.id));
  expect(events.filter((e) => e.job_id !== undefined && !ids.has(e.job_id))).toEqual([]);
  expect(events.filter((e) => e.type === "job.finished")).toHaveLength(names.length);
}

describe("Redis flushed under Durable Objects that keep their storage", () => {
  it("runs new flows under the old flows' ids clean, with fresh streams and their events in the context's feed", async () => {
    const client = admin().client;
    const ctx = (await client.createContext()).id;
    const registered = await stack().registerTestRunner(client, ctx);
    let runner: TestRunnerProcess = await registered.start();
    const before = [
      await client.submitFlow(ctx, { start: true, jobs: [job("a1"), job("a2", ["a1"]), job("a3", ["a2"])] }),
      await client.submitFlow(ctx, { start: true, jobs: [job("b1")] }),
    ];
    for (const flow of before) expect((await flowEnd(client, ctx, flow.id)).status).toBe("finished");
    expect((await streamOf(ctx, before[0]?.id as number)).length).toBeGreaterThan(10);

    await stack().redis.exec(["FLUSHALL"]);
    // The same actor (same key), context and runner, as an operator restoring them would.
    await stack().anonymous.registerActor(admin().jwk, { id: admin().id });
    expect((await client.createContext({ id: ctx })).id).toBe(ctx);
    // A runner process of its own: the old one remembers the attempts it ran by flow, job and attempt.
    await runner.kill();
    const again = await stack().registerTestRunner(client, ctx, {}, 200, registered);
    expect(again.id).toBe(registered.id);
    runner = await again.start();

    // At an object that holds the old flow in memory.
    const first = await client.submitFlow(ctx, { start: true, jobs: [job("n1"), job("n2", ["n1"])] });
    expect(first.id).toBe(before[0]?.id);
    await expectRanClean(ctx, await flowEnd(client, ctx, first.id), ["n1", "n2"]);

    // At an object with the old flow's storage only (a restart evicted every object).
    await stack().restartWorker();
    const second = await client.submitFlow(ctx, { start: true, jobs: [job("m1"), job("m2"), job("m3", ["m1", "m2"])] });
    expect(second.id).toBe(before[1]?.id);
    await expectRanClean(ctx, await flowEnd(client, ctx, second.id), ["m1", "m2", "m3"]);
    expect(runner.stdout()).not.toMatch(/^duplicate /m);

    // The context's feed took both lives of each id: the new flows' events, numbered from 1
    // again in their flows, follow the old ones'.
    const finished = (events: FeedEvent[], id: number) =>
      events.filter((e) => e.flow_id === id && e.type === "flow.finished").length;
    const read = await readSse(`${stack().url}/v1/contexts/${ctx}/events?since=0`, await signer(), (e) => {
      const events = parsed<FeedEvent>(e);
      return finished(events, first.id) === 2 && finished(events, second.id) === 2;
    });
    const feed = parsed<FeedEvent>(read.events);
    expect(feed.map((e) => e.seq)).toEqual(feed.map((_, i) => i + 1));
    for (const id of [first.id, second.id]) {
      const lives = feed.filter((e) => e.flow_id === id).map((e) => [e.type, e.flow_seq]);
      expect(lives).toEqual([
        ["flow.created", 1],
        ["flow.started", expect.any(Number)],
        ["flow.finished", expect.any(Number)],
        ["flow.created", 1],
        ["flow.started", expect.any(Number)],
        ["flow.finished", expect.any(Number)],
      ]);
    }
  });
});
