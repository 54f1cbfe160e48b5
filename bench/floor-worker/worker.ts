/**
 * The floor of a lone job's path (bench/floor.ts, docs/benchmark.md "The floor"): a Worker and
 * a Durable Object that do nothing but the I/O the coordinator's path is made of, in the same
 * order, through the same `wrangler dev`, REST endpoint and loopback. No signature, no
 * validation, no state machine: what it measures is what the stack costs before any of this
 * project's code runs. `POST /?path=<name>` takes one of PATHS; the runner's URL and the REST
 * endpoint's come as vars.
 */
import { DurableObject } from "cloudflare:workers";

interface Env {
  FLOW: DurableObjectNamespace<FloorFlow>;
  REST_URL: string;
  REST_TOKEN: string;
  RUNNER_URL: string;
}

/** Jobs in the chain path, as in the benchmark's chain shape. */
const CHAIN = 10;

/** One command through the REST endpoint: a storage round trip. */
async function trip(env: Env, command: (string | number)[]): Promise<unknown> {
  const res = await fetch(env.REST_URL, {
    method: "POST",
    headers: { authorization: `Bearer ${env.REST_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify(command),
  });
  return ((await res.json()) as { result: unknown }).result;
}

/** A delivery to the runner, its answer read. */
async function deliver(env: Env, id: string, step = 0): Promise<void> {
  const res = await fetch(env.RUNNER_URL, { method: "POST", body: JSON.stringify({ id, step }) });
  await res.arrayBuffer();
}

/** A flow's object: keeps its scope, stores, delivers (and, for a chain, stores and delivers again). */
export class FloorFlow extends DurableObject<Env> {
  async create(id: string, chain: boolean): Promise<void> {
    await this.ctx.storage.put("scope", { id });
    await trip(this.env, ["SET", `floor:flow:${id}`, "0"]);
    if (!chain) {
      // As the coordinator does: the delivery goes on after the answer.
      void deliver(this.env, id);
      return;
    }
    for (let step = 1; step <= CHAIN; step++) {
      await deliver(this.env, id, step);
      await trip(this.env, ["SET", `floor:flow:${id}`, String(step)]);
    }
  }
}

/** The paths, each adding one part of a lone job's path to the one before. */
const PATHS = {
  /** wrangler dev's proxy and the Worker, which delivers at once. */
  proxy: async (env: Env, ctx: ExecutionContext) => ctx.waitUntil(deliver(env, "0")),
  /** … after one storage round trip. */
  "one-trip": async (env: Env, ctx: ExecutionContext) => {
    const id = String(await trip(env, ["INCR", "floor:id"]));
    ctx.waitUntil(deliver(env, id));
  },
  /** … after two, one after the other (a reservation, then a creation). */
  "two-trips": async (env: Env, ctx: ExecutionContext) => {
    const id = String(await trip(env, ["INCR", "floor:id"]));
    await trip(env, ["SET", `floor:flow:${id}`, "0"]);
    ctx.waitUntil(deliver(env, id));
  },
  /** A fresh object per flow, named without a reservation: its write, one round trip, the delivery. */
  "object-one-trip": async (env: Env) => {
    const id = crypto.randomUUID();
    await env.FLOW.get(env.FLOW.idFromName(id)).create(id, false);
  },
  /** The coordinator's shape: a reservation in the Worker, then the object as above. */
  "object-two-trips": async (env: Env) => {
    const id = String(await trip(env, ["INCR", "floor:id"]));
    await env.FLOW.get(env.FLOW.idFromName(id)).create(id, false);
  },
  /** The same, then a chain: each delivery answered (its result in the answer), stored, the next delivered. */
  chain: async (env: Env) => {
    const id = String(await trip(env, ["INCR", "floor:id"]));
    await env.FLOW.get(env.FLOW.idFromName(id)).create(id, true);
  },
} satisfies Record<string, (env: Env, ctx: ExecutionContext) => Promise<void>>;

export default {
  async fetch(request, env, ctx): Promise<Response> {
    const name = new URL(request.url).searchParams.get("path");
    if (request.method !== "POST") return new Response("ok");
    await request.arrayBuffer();
    if (!name || !Object.hasOwn(PATHS, name)) return new Response(`no path ${name}`, { status: 404 });
    await PATHS[name as keyof typeof PATHS](env, ctx);
    return new Response("{}", { status: 201 });
  },
} satisfies ExportedHandler<Env>;
