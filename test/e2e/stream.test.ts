import { describe, expect, it } from "vitest";
import { actorKeyId } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import { FlowStreamEvent, type FlowView } from "../../shared/model/index.js";
import { flowEnd } from "../support/flow-runs.js";
import { layeredJobs } from "../support/jobs.js";
import { collectSocket, parsed, readSse, refusedUpgrade, type SseEvent } from "../support/streams.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { eventually } from "../support/eventually.js";

// A flow's event stream on a stack of this file's own (redis-server, REST endpoint, wrangler dev)
// with real runner processes: the wire format, order, resuming without loss or duplicates, who
// may read it, many subscribers, a Worker restart (every object evicted) under watchers, and a
// flow of more than 1,000 events.

const { stack, admin, submit } = usePrivateStack("stream");

const DIAMOND = [
  { name: "a", script: "true", script_type: "sh" as const },
  { name: "b", script: "true", script_type: "sh" as const, depends: ["a"] },
  { name: "c", script: "true", script_type: "sh" as const, depends: ["a"] },
  { name: "d", script: "true", script_type: "sh" as const, depends: ["b", "c"] },
];

const ended = (events: SseEvent[]) => events.some((e) => e.event === "flow.finished" || e.event === "flow.error");

async function signer() {
  return signerFromJwk(admin().jwk, actorKeyId(admin().id));
}

function eventsUrl(contextId: number, flowId: number, query = ""): string {
  return `${stack().url}/v1/contexts/${contextId}/flows/${flowId}/events${query}`;
}

/** A context with a push runner that runs its jobs (WORK_MS each). */
async function contextWithRunner(extra: Record<string, string> = {}) {
  const ctx = await admin().client.createContext();
  await (await stack().registerTestRunner(admin().client, ctx.id, extra)).start();
  return ctx;
}

/** Checks a whole stream: numbered 1..n without a gap, each event valid. */
function checkSequence(events: SseEvent[]): FlowStreamEvent[] {
  const all = parsed<FlowStreamEvent>(events).map((e) => FlowStreamEvent.parse(e));
  expect(all.map((e) => e.seq)).toEqual(all.map((_, i) => i + 1));
  expect(events.map((e) => Number(e.id))).toEqual(all.map((e) => e.seq));
  expect(events.map((e) => e.event)).toEqual(all.map((e) => e.type));
  return all;
}

describe("a flow's event stream", () => {
  it("tells a diamond flow's life in order, as Server-Sent Events", async () => {
    const ctx = await contextWithRunner({ WORK_MS: "200" });
    const flow = await submit(ctx.id, { jobs: DIAMOND });
    const read = await readSse(eventsUrl(ctx.id, flow.id), await signer(), ended);
    expect(read.contentType).toMatch(/^text\/event-stream/);
    const events = checkSequence(read.events);
    expect(events[0]).toMatchObject({ type: "flow.created", flow_id: flow.id, context_id: ctx.id });
    expect(events.every((e) => e.trace_id === flow.trace_id)).toBe(true);
    expect(events.at(-1)).toMatchObject({ type: "flow.finished", status: "finished" });
    const id = (name: string) => (flow.jobs.find((j) => j.name === name) as FlowView["jobs"][number]).id;
    const of = (name: string) => events.filter((e) => e.job_id === id(name)).map((e) => e.type);
    for (const name of ["a", "b", "c", "d"]) {
      expect(of(name)).toEqual(expect.arrayContaining(["job.ready", "job.dispatched", "job.started", "job.finished"]));
      expect(of(name).indexOf("job.ready")).toBeLessThan(of(name).indexOf("job.finished"));
    }
    expect(of("d")[0]).toBe("job.waiting");
    // d is ready only after both b and c finished.
    const at = (type: string, name: string) => events.findIndex((e) => e.type === type && e.job_id === id(name));
    expect(at("job.ready", "d")).toBeGreaterThan(Math.max(at("job.finished", "b"), at("job.finished", "c")));
    expect(events.find((e) => e.type === "job.finished" && e.job_id === id("a"))?.result).toBeDefined();
  });

  it("resumes after a disconnect with Last-Event-ID or since: nothing lost, nothing twice", async () => {
    const ctx = await contextWithRunner({ WORK_MS: "100" });
    const flow = await submit(ctx.id, { jobs: layeredJobs("r", 3, 3) });
    const first = await readSse(eventsUrl(ctx.id, flow.id), await signer(), (e) => e.length >= 5);
    const cut = Number(first.events[4]?.id);
    const rest = await readSse(eventsUrl(ctx.id, flow.id), await signer(), ended, {
      headers: { "last-event-id": String(cut) },
    });
    const whole = checkSequence([...first.events.slice(0, 5), ...rest.events]);
    expect(whole.at(-1)?.type).toBe("flow.finished");
    const bySince = await readSse(eventsUrl(ctx.id, flow.id, `?since=${cut}`), await signer(), ended);
    expect(bySince.events.map((e) => e.data)).toEqual(rest.events.map((e) => e.data));
    // The view says where its stream stands: subscribing after it gives only what follows.
    const view = await admin().client.loadFlow(ctx.id, flow.id);
    expect(view.last_seq).toBe(whole.length);
  });

  it("answers as reading the flow does: readers and up; others 401, 403 or 404", async () => {
    const ctx = await contextWithRunner();
    const flow = await submit(ctx.id, { jobs: DIAMOND.slice(0, 1) });
    await flowEnd(admin().client, ctx.id, flow.id);
    const reader = await stack().newActor();
    const stranger = await stack().newActor();
    await admin().client.grant(ctx.id, "readers", reader.id);
    const as = (a: { jwk: typeof reader.jwk; id: number }) => signerFromJwk(a.jwk, actorKeyId(a.id));

    const unsigned = await readSse(eventsUrl(ctx.id, flow.id), undefined, ended);
    expect([unsigned.status, unsigned.problem?.type]).toEqual([401, "/problems/signature-missing"]);
    const refused = await readSse(eventsUrl(ctx.id, flow.id), await as(stranger), ended);
    expect([refused.status, refused.problem?.type]).toEqual([403, "/problems/forbidden"]);
    const missing = await readSse(eventsUrl(ctx.id, 999_999), await signer(), ended);
    expect([missing.status, missing.problem?.type]).toEqual([404, "/problems/not-found"]);
    const badSince = await readSse(eventsUrl(ctx.id, flow.id, "?since=-1"), await signer(), ended);
    expect(badSince.status).toBe(400);
    const read = await readSse(eventsUrl(ctx.id, flow.id), await as(reader), ended);
    expect(checkSequence(read.events).at(-1)?.type).toBe("flow.finished");
  });

  it("opens a WebSocket with a single-use ticket, and refuses it twice or without one", async () => {
    const ctx = await contextWithRunner();
    const flow = await submit(ctx.id, { jobs: DIAMOND });
    await flowEnd(admin().client, ctx.id, flow.id);
    const { ticket } = (await admin().client.request("POST", "/v1/tickets", {})) as { ticket: string };
    // A ticket stands for a signature only on a stream's (or /rpc's) WebSocket handshake.
    const plain = await fetch(`${stack().url}/v1/contexts/${ctx.id}/flows/${flow.id}?ticket=${ticket}`);
    expect([plain.status, ((await plain.json()) as { type: string }).type]).toEqual([401, "/problems/ticket-invalid"]);
    const post = await refusedUpgrade(`${stack().url}/v1/contexts/${ctx.id}/pause?ticket=${ticket}`, "POST");
    expect([post.status, post.problem.type]).toEqual([401, "/problems/ticket-invalid"]);
    expect((await admin().client.loadContext(ctx.id)).id).toBe(ctx.id);
    const wsUrl = eventsUrl(ctx.id, flow.id, `?ticket=${ticket}`).replace(/^http/, "ws");
    const socket = collectSocket(wsUrl);
    await socket.opened;
    const frames = await eventually(
      async () => {
        const all = socket.frames.map((f) => JSON.parse(f) as FlowStreamEvent);
        return all.some((e) => e.type === "flow.finished") ? all : undefined;
      },
      30_000,
      100,
      "the WebSocket to replay the flow to its end",
    );
    expect(frames.map((e) => e.seq)).toEqual(frames.map((_, i) => i + 1));
    socket.socket.close();

    await expect(collectSocket(wsUrl).opened).rejects.toThrow(/did not open/);
    const again = await refusedUpgrade(eventsUrl(ctx.id, flow.id, `?ticket=${ticket}`));
    expect([again.status, again.problem.type]).toEqual([401, "/problems/ticket-invalid"]);
    const none = await refusedUpgrade(eventsUrl(ctx.id, flow.id));
    expect([none.status, none.problem.type]).toEqual([401, "/problems/signature-missing"]);
    const forged = await refusedUpgrade(eventsUrl(ctx.id, flow.id, `?ticket=${"x".repeat(43)}`));
    expect([forged.status, forged.problem.type]).toEqual([401, "/problems/ticket-invalid"]);
  });

  it("gives twenty subscribers the same stream", async () => {
    const ctx = await contextWithRunner({ WORK_MS: "300" });
    const flow = await submit(ctx.id, { jobs: layeredJobs("m", 2, 3) });
    const reads = await Promise.all(
      Array.from({ length: 20 }, async () => readSse(eventsUrl(ctx.id, flow.id), await signer(), ended)),
    );
    const first = reads[0]?.events ?? [];
    expect(checkSequence(first).at(-1)?.type).toBe("flow.finished");
    for (const read of reads) expect(read.events).toEqual(first);
  });

  it("keeps every event across a restart of the Worker (every object evicted) under watchers", async () => {
    const ctx = await contextWithRunner({ WORK_MS: "1500" });
    const flow = await submit(ctx.id, { jobs: layeredJobs("e", 3, 2) });
    const before = await readSse(eventsUrl(ctx.id, flow.id), await signer(), (e) =>
      e.some((x) => x.event === "job.started"),
    );
    await stack().restartWorker();
    const last = Number(before.events.at(-1)?.id);
    const after = await readSse(eventsUrl(ctx.id, flow.id), await signer(), ended, {
      headers: { "last-event-id": String(last) },
    });
    const whole = checkSequence([...before.events, ...after.events]);
    expect(whole.at(-1)?.type).toBe("flow.finished");
    const finished = new Set(whole.filter((e) => e.type === "job.finished").map((e) => e.job_id));
    expect(finished.size).toBe(6);
  });

  it("streams a flow of more than 1,000 events, live and replayed", async () => {
    const ctx = await contextWithRunner();
    const flow = await submit(ctx.id, { jobs: layeredJobs("k", 10, 25) });
    const live = await readSse(eventsUrl(ctx.id, flow.id), await signer(), ended, { timeoutMs: 110_000 });
    const events = checkSequence(live.events);
    expect(events.length).toBeGreaterThan(1_000);
    expect(events.filter((e) => e.type === "job.finished")).toHaveLength(250);
    const replay = await readSse(eventsUrl(ctx.id, flow.id), await signer(), (e) => e.length >= events.length);
    expect(replay.events.map((e) => e.data)).toEqual(live.events.map((e) => e.data));
  }, 150_000);
});
