import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { PROBLEM_CODES, PROTOCOL_ERRORS } from "../../functions/api/rpc-dispatch.js";
import { rpcMethods } from "../../functions/api/rpc-methods.js";
import { NOTIFICATIONS, SOCKET_METHODS } from "../../functions/api/rpc-subscriptions.js";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import type { CoordinatorClient } from "../../shared/client/index.js";
import { BASE, signed, testWorker } from "./harness.js";
import { RpcSocket } from "./rpc-session.js";

// GET /openrpc.json: every method documented from the schemas it validates with, and the
// documented schemas checked against real answers.

const w = testWorker("rpc-openrpc");
afterAll(() => w.cleanup());

type Schema = Record<string, unknown>;
interface Descriptor {
  name: string;
  required: boolean;
  schema: Schema;
}
interface MethodDoc {
  name: string;
  summary: string;
  paramStructure: string;
  params: Descriptor[];
  result?: { name: string; schema: Schema };
  errors?: { $ref: string }[];
  servers?: { name: string; url: string }[];
  "x-notification"?: boolean;
}
interface OpenRpc {
  openrpc: string;
  servers: { name: string; url: string }[];
  methods: MethodDoc[];
  components: { schemas: Record<string, Schema>; errors: Record<string, { code: number; message: string }> };
}

let doc: OpenRpc;
let actor: Awaited<ReturnType<typeof w.newActor>>;
let admin: CoordinatorClient;

beforeAll(async () => {
  const res = await w.fetch(new Request(`${BASE}/openrpc.json`));
  expect(res.status).toBe(200);
  doc = (await res.json()) as OpenRpc;
  actor = await w.newActor();
  admin = actor.client;
});

const methodDoc = (name: string): MethodDoc => {
  const found = doc.methods.find((m) => m.name === name);
  if (!found) throw new Error(`${name} is not in the document`);
  return found;
};

/** A documented schema as a zod validator: its refs resolved against the document's components. */
function validator(schema: Schema): z.ZodType {
  const text = JSON.stringify({ ...schema, $defs: doc.components.schemas }).replaceAll(
    "#/components/schemas/",
    "#/$defs/",
  );
  return z.fromJSONSchema(JSON.parse(text) as Parameters<typeof z.fromJSONSchema>[0]);
}

/** Calls a method over POST /rpc and checks the answer against the result schema the document gives it. */
async function documented(method: string, params: Record<string, unknown>): Promise<unknown> {
  const result = await admin.rpc(method, params);
  const schema = methodDoc(method).result?.schema;
  if (!schema) throw new Error(`${method} has no result`);
  const checked = validator(schema).safeParse(result);
  expect(checked.error?.issues, `${method}'s answer against its documented result`).toBeUndefined();
  return result;
}

describe("GET /openrpc.json", () => {
  it("documents every method of the tables with by-name params and a result", () => {
    expect(doc.openrpc).toMatch(/^1\.3\./);
    expect(doc.servers.map((s) => [s.name, s.url])).toEqual([
      ["http", `${BASE}/rpc`],
      ["websocket", `${BASE.replace("http", "ws")}/rpc`],
    ]);
    const tables = { ...rpcMethods(), ...SOCKET_METHODS };
    for (const [name, method] of Object.entries(tables)) {
      const m = methodDoc(name);
      expect(m.summary).toBe(method.summary);
      expect(m.paramStructure).toBe("by-name");
      expect(m.result?.schema, name).toBeTypeOf("object");
      // The params are the properties of the params schema, required ones first (as OpenRPC asks).
      const shape = (method.params as z.ZodObject).shape;
      expect(m.params.map((p) => p.name).sort(), name).toEqual(Object.keys(shape).sort());
      const firstOptional = m.params.findIndex((p) => !p.required);
      if (firstOptional >= 0)
        expect(
          m.params.slice(firstOptional).every((p) => !p.required),
          name,
        ).toBe(true);
      for (const p of m.params) expect(p.schema, `${name}.${p.name}`).toBeTypeOf("object");
      for (const e of m.errors ?? []) expect(doc.components.errors).toHaveProperty(e.$ref.split("/").pop() as string);
    }
    expect(doc.methods.length).toBe(Object.keys(tables).length + Object.keys(NOTIFICATIONS).length);
  });

  it("documents the params each method takes, as the method validates them", () => {
    const flowCreate = methodDoc("flow.create");
    expect(flowCreate.params.filter((p) => p.required).map((p) => p.name)).toEqual(["jobs", "context_id"]);
    const idem = flowCreate.params.find((p) => p.name === "idempotency_key");
    expect(idem).toMatchObject({ required: false, schema: { type: "string", minLength: 1, maxLength: 128 } });
    // A default makes a param optional for callers.
    expect(methodDoc("flow.cancel").params.find((p) => p.name === "reason")).toMatchObject({ required: false });
    expect(methodDoc("flow.subscribe").params.map((p) => [p.name, p.required])).toEqual([
      ["context_id", true],
      ["id", true],
      ["since", false],
    ]);
  });

  it("names the errors with the codes calls answer with, and the notifications without a result", () => {
    const codes = Object.values(doc.components.errors).map((e) => e.code);
    expect(codes).toEqual(expect.arrayContaining([...Object.values(PROBLEM_CODES), ...Object.values(PROTOCOL_ERRORS)]));
    expect(doc.components.errors.Forbidden?.code).toBe(-32003);
    expect(methodDoc("flow.create").errors?.map((e) => e.$ref.split("/").pop())).toEqual([
      "InvalidInput",
      "Forbidden",
      "NotFound",
      "Conflict",
      "IdempotencyKeyReused",
      "StorageUnavailable",
    ]);
    const event = methodDoc("flow.event");
    expect(event).toMatchObject({ "x-notification": true, servers: [{ name: "websocket" }] });
    expect(event.result).toBeUndefined();
    expect(event.params.find((p) => p.name === "event")?.schema).toEqual({
      $ref: "#/components/schemas/FlowStreamEvent",
    });
    expect(methodDoc("flow.subscribe").servers?.map((s) => s.name)).toEqual(["websocket"]);
    expect(methodDoc("flow.load").servers).toBeUndefined();
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(["Actor", "Context", "FlowView", "FlowDag", "FlowStreamEvent", "Problem", "RunnerJob"]),
    );
  });

  it("has schemas that real answers validate against, and that refuse what they do not describe", async () => {
    const context = (await documented("context.create", {})) as { id: number };
    const runner = (await documented("runner.create", {
      context_id: context.id,
      pubkey: (await generateKeyPair()).x,
      runner_type: "sh",
      local: true,
    })) as { id: number };
    const loaded = await documented("runner.load", { context_id: context.id, id: runner.id });
    // The validator is strict: a runner with its dispatch is not a plain Runner.
    expect(validator({ $ref: "#/components/schemas/Runner" }).safeParse(loaded).success).toBe(false);
    const flow = (await documented("flow.create", {
      context_id: context.id,
      jobs: [
        { name: "a", script: "echo a", script_type: "sh" },
        { name: "b", script: "echo b", script_type: "sh", depends: ["a"] },
      ],
    })) as { id: number; caller_id: number; jobs: { id: number }[] };
    await documented("flow.load", { context_id: context.id, id: flow.id });
    await documented("flow.dag", { context_id: context.id, id: flow.id });
    await documented("flow.start", { context_id: context.id, id: flow.id });
    await documented("flow.list", { context_id: context.id });
    await documented("flow.cancel", { context_id: context.id, id: flow.id });
    await documented("runner.list", { context_id: context.id });
    await documented("deadletter.list", { context_id: context.id });
    await documented("context.list", {});
    await documented("context.pause", { id: context.id });
    await documented("context.resume", { id: context.id });
    await documented("actor.load", { id: flow.caller_id });
    await documented("job.load", { context_id: context.id, caller_id: flow.caller_id, id: flow.jobs[0]?.id });
    await documented("message.inbox", { context_id: context.id });
    // A session's flow.event notification carries the params the document gives it.
    const socket = await RpcSocket.open(
      w,
      await signed("GET", "/rpc", actor.jwk, actorKeyId(actor.actor.id), undefined, {
        headers: { upgrade: "websocket" },
      }),
    );
    const { subscription } = await socket.result<{ subscription: string }>("flow.subscribe", {
      context_id: context.id,
      id: flow.id,
    });
    const [first] = await socket.untilEvent(subscription, () => true, "an event");
    const notification = socket.frames[first?.at ?? -1] as { params: unknown };
    const params = methodDoc("flow.event").params;
    const shape = {
      type: "object",
      properties: Object.fromEntries(params.map((p) => [p.name, p.schema])),
      required: params.filter((p) => p.required).map((p) => p.name),
      additionalProperties: false,
    };
    expect(validator(shape).safeParse(notification.params).error?.issues).toBeUndefined();
    socket.close();
    // What the document says about bad params is what the call answers.
    const refused = await admin.rpc("flow.load", { context_id: context.id }).catch((e: unknown) => e);
    expect(refused).toMatchObject({ rpcCode: doc.components.errors.InvalidInput?.code });
  });
});
