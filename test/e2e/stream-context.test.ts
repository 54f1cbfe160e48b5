import { describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import type { FlowStreamEvent } from "../../shared/model/index.js";
import { ContextStreamEvent } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { flowEnd } from "../support/flow-runs.js";
import { parsed, readSse, type SseEvent } from "../support/streams.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// A context's event stream (every flow's own events, in one sequence) and the events of a flow
// that fails, retries, is dead-lettered, re-run, paused and cancelled, on a stack of this file's
// own with a real runner process.

const { stack, admin, submit } = usePrivateStack("stream-context");

type FlowEvent = Extract<ContextStreamEvent, { flow_id: number }>;

async function signer() {
  return signerFromJwk(admin().jwk, actorKeyId(admin().id));
}

describe("a context's event stream", () => {
  it("tells every flow's life in one sequence, and resumes from any point of it", async () => {
    const ctx = await admin().client.createContext();
    await (await stack().registerTestRunner(admin().client, ctx.id, { WORK_MS: "1500", FAIL: "bad" })).start();
    const url = `${stack().url}/v1/contexts/${ctx.id}/events`;
    const seen = (events: SseEvent[], flowId: number, type: string) =>
      parsed<FlowEvent>(events).filter((e) => e.flow_id === flowId && e.type === type).length;

    const ok = await submit(ctx.id, {
      jobs: [
        { name: "one", script: "true", script_type: "sh" },
        { name: "two", script: "true", script_type: "sh", depends: ["one"] },
      ],
    });
    const failing = await submit(ctx.id, { jobs: [{ name: "bad", script: "false", script_type: "sh", retries: 1 }] });
    await admin().client.setPaused(ctx.id, true);
    await admin().client.setPaused(ctx.id, false);
    const idle = await admin().client.submitFlow(ctx.id, {
      jobs: [{ name: "idle", script: "true", script_type: "sh" }],
    });
    await admin().client.cancelFlow(ctx.id, idle.id, "not needed");
    expect((await flowEnd(admin().client, ctx.id, failing.id)).status).toBe("error");
    await admin().client.rerunFlow(ctx.id, failing.id);

    const read = await readSse(
      `${url}?since=0`,
      await signer(),
      (events) =>
        seen(events, ok.id, "flow.finished") === 1 &&
        seen(events, failing.id, "flow.error") === 2 &&
        seen(events, idle.id, "flow.cancelled") === 1,
    );
    const events = parsed<ContextStreamEvent>(read.events).map((e) => ContextStreamEvent.parse(e)) as FlowEvent[];
    expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
    expect(events.every((e) => e.type.startsWith("flow."))).toBe(true);
    for (const flowId of [ok.id, failing.id, idle.id]) {
      const mine = events.filter((e) => e.flow_id === flowId).map((e) => e.flow_seq);
      expect(mine).toEqual([...mine].sort((a, b) => a - b));
      expect(new Set(mine).size).toBe(mine.length);
    }
    const types = (flowId: number) => events.filter((e) => e.flow_id === flowId).map((e) => e.type);
    expect(types(ok.id)).toEqual(["flow.created", "flow.started", "flow.paused", "flow.resumed", "flow.finished"]);
    expect(types(failing.id)).toEqual(
      expect.arrayContaining(["flow.created", "flow.started", "flow.error", "flow.rerun", "flow.error"]),
    );
    expect(types(idle.id)).toEqual(["flow.created", "flow.cancelled"]);
    expect(events.find((e) => e.flow_id === idle.id && e.type === "flow.cancelled")?.reason).toBe("not needed");

    // Resuming from the middle gives exactly the rest.
    const cut = Math.floor(events.length / 2);
    const rest = await readSse(url, await signer(), (e) => e.length >= events.length - cut, {
      headers: { "last-event-id": String(cut) },
    });
    expect(rest.events.map((e) => e.data)).toEqual(read.events.slice(cut).map((e) => e.data));

    // The failing flow's own stream tells each attempt: a retry scheduled, then the error and the dead letter.
    const own = await readSse(
      `${stack().url}/v1/contexts/${ctx.id}/flows/${failing.id}/events`,
      await signer(),
      (e) => e.filter((x) => x.event === "flow.error").length === 2,
    );
    const flow = parsed<FlowStreamEvent>(own.events);
    const retry = flow.find((e) => e.type === "job.retry_scheduled");
    expect(retry).toMatchObject({ attempt: 1, status: "dispatched" });
    expect(retry?.retry_at_ms).toBeGreaterThanOrEqual(retry?.at_ms ?? Infinity);
    expect(flow.filter((e) => e.type === "job.error").map((e) => e.attempt)).toEqual([2, 4]);
    expect(flow.filter((e) => e.type === "job.dead_lettered")).toHaveLength(2);
    expect(flow.find((e) => e.type === "job.error")?.error).toBeTruthy();
  });

  it("starts from now without since, and refuses who may not read the context", async () => {
    const ctx = await admin().client.createContext();
    const before = await admin().client.submitFlow(ctx.id, {
      jobs: [{ name: "x", script: "true", script_type: "sh" }],
    });
    await eventually(
      async () => ((await admin().client.loadFlow(ctx.id, before.id)).last_seq ?? 0) > 0 || undefined,
      10_000,
    );
    const url = `${stack().url}/v1/contexts/${ctx.id}/events`;
    let live: SseEvent[] = [];
    const reading = readSse(url, await signer(), (e) => (live = e).length >= 1);
    // Flows are created until the stream (open once it shows one) tells one: never the earlier flow.
    const created: number[] = [];
    await eventually(
      async () => {
        if (live.length > 0) return true;
        created.push(
          (await admin().client.submitFlow(ctx.id, { jobs: [{ name: "y", script: "true", script_type: "sh" }] })).id,
        );
        return undefined;
      },
      20_000,
      300,
    );
    const read = await reading;
    const told = parsed<FlowEvent>(read.events)[0];
    expect(told?.type).toBe("flow.created");
    expect(created).toContain(told?.flow_id);

    const stranger = await stack().newActor();
    const refused = await readSse(url, await signerFromJwk(stranger.jwk, actorKeyId(stranger.id)), () => true);
    expect([refused.status, refused.problem?.type]).toEqual([403, "/problems/forbidden"]);
  });
});
