import { createConnection, type AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { importPublicKey } from "../../shared/auth/index.js";
import type { Message } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { answersIn } from "../support/flow-runs.js";
import { signedServer } from "../support/http.js";
import { usePrivateStack, type StackActor } from "../support/use-private-stack.js";

// A flow's result reaches its caller's inbox inside the commit that ends the flow; only a caller
// with https addresses has it relayed too, to be POSTed. Through a stack of this file's own
// (redis-server, REST endpoint, wrangler dev) and a push test runner; what Redis was sent is read
// off MONITOR (every command, with the scripts' own marked "lua").

// No cron: a sweep would show up in what is counted.
const { stack, admin } = usePrivateStack("result", { cron: false });

/** One line of MONITOR: whether the Worker sent it (else a script ran it), and its words. */
interface Seen {
  sent: boolean;
  words: string[];
}

/** Watches every command redis-server runs, until stopped. */
async function monitor(): Promise<{ stop(): Seen[] }> {
  const socket = createConnection(Number(new URL(stack().redisUrl).port), "127.0.0.1");
  let text = "";
  socket.on("data", (d: Buffer) => (text += d.toString()));
  socket.write("MONITOR\r\n");
  await eventually(async () => (text.startsWith("+OK") ? true : undefined), 5_000, 10, "MONITOR on");
  return {
    stop() {
      socket.destroy();
      return text.split("\r\n").flatMap((line) => {
        const m = /^\+\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
        if (!m) return [];
        const words = [...(m[2] as string).matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((w) => w[1] as string);
        return [{ sent: m[1] !== "lua", words }];
      });
    },
  };
}

/** Runs one lone job in a fresh context of `caller` (warmed up first) and watches Redis meanwhile. */
async function loneJob(caller: StackActor): Promise<{ contextId: number; flowId: number; seen: Seen[] }> {
  const ctx = await caller.client.createContext();
  const proc = await (await stack().registerTestRunner(caller.client, ctx.id)).start();
  // Warm up: the first flow pays for loading scripts and looking up keys and addresses.
  const warm = await caller.client.submitFlow(ctx.id, {
    start: true,
    jobs: [{ name: "w", script: "true", script_type: "sh" }],
  });
  await answersIn(proc, new RegExp(`^answered result w flow ${warm.id} `), 1);
  await stack().quietCommandStats();
  const watch = await monitor();
  const sentBefore = stack().restSent().commands;
  const flow = await caller.client.submitFlow(ctx.id, {
    start: true,
    jobs: [{ name: "x", script: "true", script_type: "sh" }],
  });
  await answersIn(proc, new RegExp(`^answered result x flow ${flow.id} `), 1);
  // What the Worker does after its answers (the commit's effects, a relay) is watched too.
  await stack().quietCommandStats();
  const all = watch.stop();
  // INFO is the test's own counting (quietCommandStats), through the REST endpoint too.
  const seen = all.filter((s) => s.words[0]?.toUpperCase() !== "INFO");
  const rest = stack().restSent().commands - sentBefore - (all.length - seen.length);
  console.log(
    `lone job of actor ${caller.id}: ${seen.filter((s) => s.sent).length} commands sent (MONITOR), ${rest} through the REST endpoint`,
  );
  if (process.env.DUMP_SEEN) for (const s of seen) if (s.sent) console.log(`sent: ${s.words.join(" ").slice(0, 150)}`);
  return { contextId: ctx.id, flowId: flow.id, seen };
}

const inbox = async (caller: StackActor, contextId: number) =>
  ((await caller.client.request("GET", `/v1/contexts/${contextId}/inbox`)) as { messages: Message[] }).messages;

/** The script-run RPUSHes of `key` onto the inbox of `actorId` in context `contextId`. */
const pushesToInbox = (seen: Seen[], contextId: number, actorId: number, key: string) =>
  seen.filter(
    (s) =>
      !s.sent && s.words[0] === "RPUSH" && s.words[1] === stack().keys.msgIn(contextId, actorId) && s.words[2] === key,
  ).length;

describe("a flow's result, in its caller's inbox from the commit that ends the flow", () => {
  it("costs a caller without an https address no command sent: nothing is relayed", async () => {
    const { contextId, flowId, seen } = await loneJob(admin());
    const message = (await inbox(admin(), contextId)).find((m) => m.flow_result?.flow_id === flowId);
    expect(message).toMatchObject({ status: "acknowledged", flow_result: { flow_id: flowId, status: "finished" } });
    const key = stack().keys.message(contextId, admin().id, (message as Message).id);
    expect(pushesToInbox(seen, contextId, admin().id, key)).toBe(1);
    // Only the commit's script call names the result: no relay claimed it, read it or settled it,
    // and nobody read the caller's addresses.
    const relayed = seen.filter(
      (s) =>
        s.sent &&
        s.words.some(
          (w) =>
            w === stack().keys.msgOut(contextId) ||
            w === stack().keys.inflight(contextId) ||
            w === stack().keys.actor(admin().id),
        ),
    );
    expect(relayed.map((s) => s.words.slice(0, 2).join(" "))).toEqual([]);
    expect(seen.filter((s) => s.sent && s.words.includes(key))).toHaveLength(1);
  });

  it("POSTs it to an https address, through the relay, which neither puts it in the inbox again nor gives up after a failed POST or a relay that died", async () => {
    const directory = (await (await fetch(`${stack().url}/.well-known/http-message-signatures-directory`)).json()) as {
      keys: { kid: string; x: string }[];
    };
    const received: Message[] = [];
    /** Flows whose result was refused once: the first POST of each fails, so the relay tries again. */
    const refused = new Set<number>();
    const server = signedServer(
      async (kid) => {
        const key = directory.keys.find((k) => k.kid === kid);
        return key ? importPublicKey(key.x) : null;
      },
      (body, res) => {
        const message = (JSON.parse(Buffer.from(body).toString()) as { message: Message }).message;
        const flow = message.flow_result?.flow_id ?? 0;
        if (!refused.has(flow)) {
          refused.add(flow);
          res.writeHead(503).end();
          return;
        }
        received.push(message);
        res.writeHead(204).end();
      },
    );
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const caller = await stack().newActor();
      await caller.client.updateActor(caller.id, {
        address: [{ type: "https", url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/inbox` }],
      });
      const { contextId, flowId, seen } = await loneJob(caller);
      const posted = await eventually(async () => received.find((m) => m.flow_result?.flow_id === flowId), 30_000);
      expect(posted).toMatchObject({ to: caller.id, status: "acknowledged", flow_result: { status: "finished" } });
      const key = stack().keys.message(contextId, caller.id, (posted as Message).id);
      expect(pushesToInbox(seen, contextId, caller.id, key)).toBe(1);
      expect(refused.has(flowId)).toBe(true);

      // A relay that took the result and died before it POSTed: the result waits in the
      // in-flight set past its settle time. The next relay (woken by the next flow's result)
      // takes it back and POSTs it, and it is still in the inbox only once.
      const before = received.filter((m) => m.flow_result?.flow_id === flowId).length;
      await stack().redis.exec(["ZADD", stack().keys.inflight(contextId), String(Date.now() - 1), key]);
      const next = await caller.client.submitFlow(contextId, {
        start: true,
        jobs: [{ name: "y", script: "true", script_type: "sh" }],
      });
      await eventually(async () => received.find((m) => m.flow_result?.flow_id === next.id), 30_000);
      await eventually(
        async () => (received.filter((m) => m.flow_result?.flow_id === flowId).length > before ? true : undefined),
        30_000,
      );
      const held = await stack().redis.exec<string[]>(["LRANGE", stack().keys.msgIn(contextId, caller.id), "0", "-1"]);
      expect(held.filter((k) => k === key)).toHaveLength(1);
      expect((await inbox(caller, contextId)).map((m) => m.flow_result?.flow_id)).toEqual(
        expect.arrayContaining([flowId, next.id]),
      );
      await stack().quietCommandStats();
      expect(await stack().redis.exec<number>(["ZCARD", stack().keys.inflight(contextId)])).toBe(0);
      expect(await stack().redis.exec<number>(["LLEN", stack().keys.msgOut(contextId)])).toBe(0);
    } finally {
      server.close();
    }
  });
});
