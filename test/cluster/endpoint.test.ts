import { Redis } from "@upstash/redis";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { DEFAULT_REST_OPTIONS, startRestServer, type RestServer } from "../../infra/redis-rest/index.js";
import { eventually } from "../support/eventually.js";
import { freshPrefix } from "../support/prefix.js";
import { RedisCluster } from "../support/redis-cluster.js";

// The REST endpoint over a real Redis Cluster (REDIS_CLUSTER): commands, pipelines, transactions
// and scripts routed by slot; MOVED and ASK followed; a slot without a master answered 503.

const cluster = RedisCluster.attach(inject("redisCluster"));
const prefix = freshPrefix("cluster-rest");
let rest: RestServer;
let raw: Redis;

beforeAll(async () => {
  rest = await startRestServer({ ...DEFAULT_REST_OPTIONS, redisCluster: cluster.seeds, port: 0, token: "t" });
  raw = new Redis({ url: rest.url, token: "t", automaticDeserialization: false, enableTelemetry: false });
});
afterAll(() => rest.close());

async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${rest.url}${path}`, {
    method: "POST",
    headers: { authorization: "Bearer t", ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as unknown };
}

/** Keys spread over every master: one per hash tag, 60 tags. */
const spread = Array.from({ length: 60 }, (_, i) => `${prefix}{t${i}}:k`);

describe("the REST endpoint over a Redis Cluster", () => {
  it("spreads keys over every master, and answers each command from its slot's master", async () => {
    const masters = new Set<number>();
    for (const key of spread) masters.add((await cluster.masterOf(await cluster.slotOf(key))) as number);
    expect(masters.size).toBe(3);
    for (const [i, key] of spread.entries()) expect(await raw.set(key, `v${i}`)).toBe("OK");
    expect(await raw.get(spread[7] as string)).toBe("v7");
    // The same through the official client's base64 answers, and a status reply bare in them.
    const b64 = await post("/", ["SET", spread[0], "x"], { "upstash-encoding": "base64" });
    expect(b64.body).toEqual({ result: "OK" });
    expect(await post("/", ["GET", spread[0]], { "upstash-encoding": "base64" })).toEqual({
      status: 200,
      body: { result: Buffer.from("x").toString("base64") },
    });
  });

  it("splits a pipeline over the slots its commands name and puts the replies back in order", async () => {
    const commands = spread.flatMap((key, i) => [
      ["SET", key, String(i)],
      ["INCRBY", key, "1000"],
      ["GET", key],
      ["HGET", key, "f"],
      ["hset", `${key}:h`, "f", String(i), "g", "x"],
      ["hgetall", `${key}:h`],
    ]);
    const { status, body } = await post("/pipeline", commands);
    expect(status).toBe(200);
    expect(body).toEqual(
      spread.flatMap((_, i) => [
        { result: "OK" },
        { result: 1000 + i },
        { result: String(1000 + i) },
        { error: "WRONGTYPE Operation against a key holding the wrong kind of value" },
        { result: expect.any(Number) },
        // As Redis sends it: a flat list of fields and values (ioredis alone would make it an object).
        { result: ["f", String(i), "g", "x"] },
      ]),
    );
    // One command of keys in two slots is refused by Redis itself, in its place.
    const crossed = await post("/pipeline", [
      ["MGET", spread[0], spread[1]],
      ["GET", spread[1]],
    ]);
    expect(crossed.body).toEqual([
      { error: "CROSSSLOT Keys in request don't hash to the same slot" },
      { result: "1001" },
    ]);
  });

  it("runs a transaction within one slot, and refuses one whose keys span slots with CROSSSLOT, writing nothing", async () => {
    const a = `${prefix}{tx}:a`;
    const b = `${prefix}{tx}:b`;
    const tx = await post("/multi-exec", [
      ["SET", a, "1"],
      ["INCR", a],
      ["RPUSH", b, "x"],
      ["GET", a],
    ]);
    expect(tx).toEqual({ status: 200, body: [{ result: "OK" }, { result: 2 }, { result: 1 }, { result: "2" }] });
    const other = `${prefix}{elsewhere}:c`;
    const refused = await post("/multi-exec", [
      ["SET", a, "9"],
      ["SET", other, "9"],
    ]);
    expect(refused).toEqual({
      status: 400,
      body: {
        error:
          "EXECABORT Transaction discarded because of previous errors: CROSSSLOT Keys in request don't hash to the same slot",
      },
    });
    expect(await raw.get(a)).toBe("2");
    expect(await raw.get(other)).toBeNull();
  });

  it("refuses a script whose keys span slots with Redis's CROSSSLOT, and one reaching a key it was not given", async () => {
    const crossed = await post("/", ["EVAL", "return redis.call('GET', KEYS[1])", "2", spread[0], spread[1]]);
    expect(crossed).toEqual({ status: 400, body: { error: "CROSSSLOT Keys in request don't hash to the same slot" } });
    // A key of another node, built inside the script: the node refuses it.
    const home = await cluster.masterOf(await cluster.slotOf(spread[0] as string));
    let far = "";
    for (const k of spread) if (!far && (await cluster.masterOf(await cluster.slotOf(k))) !== home) far = k;
    const reached = await post("/", ["EVAL", "return redis.call('GET', ARGV[1])", "1", spread[0], far]);
    expect(reached.status).toBe(400);
    expect(JSON.stringify(reached.body)).toMatch(/non local key|do not hash to the same slot|no longer/);
    // Within one slot: runs, and EVALSHA finds a script SCRIPT LOAD sent to every master.
    const sha = (await post("/", ["SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])"])).body as { result: string };
    for (const key of spread.slice(0, 6)) {
      expect((await post("/", ["EVALSHA", sha.result, "1", key])).status).toBe(200);
    }
  });

  it("follows ASK while a slot migrates and MOVED once it moved", async () => {
    const key = `${prefix}{moving}:k`;
    const slot = await cluster.slotOf(key);
    const from = (await cluster.masterOf(slot)) as number;
    const to = (await cluster.masters()).find((p) => p !== from) as number;
    await raw.set(key, "before");
    const handOver = await cluster.migrate(slot, from, to, [key]);
    // The key is on `to` already; `from` answers ASK for it, and for a key it does not hold.
    expect(await raw.get(key)).toBe("before");
    expect(await raw.set(`${prefix}{moving}:new`, "asked")).toBe("OK");
    await handOver();
    expect(await raw.get(key)).toBe("before");
    expect(await raw.get(`${prefix}{moving}:new`)).toBe("asked");
    expect(await cluster.masterOf(slot)).toBe(to);
  });

  it("answers 503, not 400, when the slot's master refuses writes for want of replicas (NOREPLICAS)", async () => {
    const key = `${prefix}{short}:k`;
    const master = (await cluster.masterOf(await cluster.slotOf(key))) as number;
    await cluster.call(master, "CONFIG", "SET", "min-replicas-to-write", "5");
    try {
      const refused = await post("/", ["SET", key, "x"]);
      expect(refused.status).toBe(503);
      expect(JSON.stringify(refused.body)).toMatch(/ERR Redis is unavailable: NOREPLICAS/);
      expect((await post("/", ["GET", key])).status).toBe(200);
    } finally {
      await cluster.call(master, "CONFIG", "SET", "min-replicas-to-write", "0");
    }
  });

  it("answers 503 for a slot without a master while its replica takes over, and every other slot all along", async () => {
    const key = `${prefix}{failing}:n`;
    const slot = await cluster.slotOf(key);
    const master = (await cluster.masterOf(slot)) as number;
    const elsewhere: string[] = [];
    for (const k of spread) if ((await cluster.masterOf(await cluster.slotOf(k))) !== master) elsewhere.push(k);
    await cluster.kill(master);
    try {
      const statuses = new Map<number, number>();
      let otherFailures = 0;
      await eventually(
        async () => {
          const [own, other] = await Promise.all([
            post("/", ["INCR", key]),
            post("/", ["GET", elsewhere[statuses.size % elsewhere.length]]),
          ]);
          statuses.set(own.status, (statuses.get(own.status) ?? 0) + 1);
          if (own.status !== 200) expect(JSON.stringify(own.body)).toMatch(/ERR Redis is unavailable/);
          if (other.status !== 200) otherFailures++;
          return own.status === 200 && (await cluster.masterOf(slot)) !== master ? true : undefined;
        },
        30_000,
        50,
        "the slot's replica taking over",
      );
      console.log(
        `cluster: a slot's failover answered ${JSON.stringify(Object.fromEntries(statuses))} (status: requests)`,
      );
      expect([...statuses.keys()].every((s) => s === 200 || s === 503)).toBe(true);
      expect(otherFailures).toBe(0);
    } finally {
      await cluster.restart(master);
      await cluster.healthy();
    }
  });
});
