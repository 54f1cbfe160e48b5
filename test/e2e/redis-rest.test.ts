import { spawn } from "node:child_process";
import { Redis, errors } from "@upstash/redis";
import { afterAll, describe, expect, it } from "vitest";
import { startRestServer, DEFAULT_REST_OPTIONS } from "../../infra/redis-rest/index.js";
import { freePort } from "../../infra/redis-server.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";
import { watchProcess } from "../support/process.js";
import { readTestStackConfig } from "../support/stack-config.js";

const stack = readTestStackConfig();
const prefix = freshPrefix("rest");
const k = (name: string) => `${prefix}${name}`;

/** The official client as an application would configure it (base64 responses, retries). */
const redis = new Redis({ url: stack.restUrl, token: stack.restToken, enableTelemetry: false });
/** The same without automatic deserialization: values come back exactly as stored. */
const raw = new Redis({
  url: stack.restUrl,
  token: stack.restToken,
  automaticDeserialization: false,
  enableTelemetry: false,
});
/** Without base64 responses, to check the plain JSON path too. */
const plain = new Redis({
  url: stack.restUrl,
  token: stack.restToken,
  responseEncoding: false,
  enableTelemetry: false,
});

afterAll(async () => {
  await deletePrefix(raw, prefix);
});

async function post(path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${stack.restUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.restToken}`, ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

describe("the official @upstash/redis client against the REST endpoint", () => {
  it("round-trips unicode strings with and without base64 responses", async () => {
    const text = 'héllo wörld — 世界 🎉 "quotes" \\ back\nnewline';
    await redis.set(k("unicode"), text);
    expect(await raw.get(k("unicode"))).toBe(text);
    expect(await plain.get(k("unicode"))).toBe(text);
  });

  it("keeps number-like strings as strings when automatic deserialization is off", async () => {
    for (const [name, value] of [
      ["zero", "007"],
      ["exp", "1e3"],
      ["big", "12345678901234567890"],
      ["float", "1.50"],
    ]) {
      await raw.set(k(name as string), value);
      expect(await raw.get(k(name as string))).toBe(value);
    }
    expect(await raw.exec(["INCRBY", k("counter"), 5])).toBe(5);
    expect(await (await post("/", ["SET", k("bool"), true])).json()).toEqual({ result: "OK" });
    expect(await raw.get(k("bool"))).toBe("true");
  });

  it("handles hashes", async () => {
    await raw.hset(k("hash"), { a: "1", b: "two", c: '{"json":true}' });
    expect(await raw.hincrby(k("hash"), "a", 10)).toBe(11);
    expect(await raw.exec(["HGETALL", k("hash")])).toEqual(["a", "11", "b", "two", "c", '{"json":true}']);
    expect(await redis.hgetall(k("hash"))).toEqual({ a: 11, b: "two", c: { json: true } });
    expect(await raw.hget(k("hash"), "missing")).toBeNull();
  });

  it("handles lists", async () => {
    await raw.rpush(k("list"), "x", "y", "z");
    expect(await raw.lrange(k("list"), 0, -1)).toEqual(["x", "y", "z"]);
    expect(await raw.lmove(k("list"), k("list2"), "left", "right")).toBe("x");
    expect(await raw.rpop(k("list"))).toBe("z");
    expect(await raw.llen(k("list"))).toBe(1);
  });

  it("handles sorted sets, WITHSCORES included", async () => {
    await raw.zadd(k("zset"), { score: 2, member: "b" }, { score: 1, member: "a" }, { score: 3.5, member: "c" });
    expect(await raw.zrange(k("zset"), 0, -1, { withScores: true })).toEqual(["a", "1", "b", "2", "c", "3.5"]);
    expect(await redis.zrange(k("zset"), 0, -1, { withScores: true })).toEqual(["a", 1, "b", 2, "c", 3.5]);
    expect(await raw.zrange(k("zset"), 2, 4, { byScore: true })).toEqual(["b", "c"]);
    expect(await raw.zscore(k("zset"), "c")).toBe("3.5");
  });

  it("handles streams (nested XRANGE replies)", async () => {
    const id1 = await raw.xadd(k("stream"), "*", { field: "one", n: "1" });
    const id2 = await raw.xadd(k("stream"), "*", { field: "two" });
    expect(await raw.exec(["XRANGE", k("stream"), "-", "+"])).toEqual([
      [id1, ["field", "one", "n", "1"]],
      [id2, ["field", "two"]],
    ]);
    expect(await redis.xrange(k("stream"), "-", "+")).toEqual({
      [id1]: { field: "one", n: 1 },
      [id2]: { field: "two" },
    });
    expect(await raw.xlen(k("stream"))).toBe(2);
  });

  it("returns a failing command's error in its place inside a pipeline", async () => {
    await raw.set(k("text"), "not a number");
    const p = raw.pipeline();
    p.set(k("p1"), "v1");
    p.incr(k("text"));
    p.get(k("p1"));
    const results = await p.exec({ keepErrors: true });
    expect(results[0]).toMatchObject({ result: "OK" });
    expect(results[1]?.error).toMatch(/not an integer/);
    expect(results[2]).toMatchObject({ result: "v1" });
    const failing = raw.pipeline();
    failing.incr(k("text"));
    await expect(failing.exec()).rejects.toThrow(/not an integer/);
  });

  it("runs transactions atomically, and applies nothing when one is refused while queueing", async () => {
    const tx = raw.multi();
    tx.set(k("tx"), "1");
    tx.incr(k("tx"));
    tx.get(k("tx"));
    expect(await tx.exec()).toEqual(["OK", 2, "2"]);

    const res = await post("/multi-exec", [["SET", k("tx-aborted"), "x"], ["INCR"]]);
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: string }).error).toMatch(/^EXECABORT.*wrong number of arguments/);
    expect(await raw.exists(k("tx-aborted"))).toBe(0);
  });

  it("falls back from EVALSHA to EVAL on NOSCRIPT and returns Lua tables as nested arrays", async () => {
    await raw.exec(["SCRIPT", "FLUSH"]);
    const script = raw.createScript<unknown>(
      "redis.call('SET', KEYS[1], ARGV[1]); return {ARGV[1], 42, {'nested', false}, redis.call('GET', KEYS[1])}",
    );
    expect(await script.exec([k("lua")], ["from-lua"])).toEqual(["from-lua", 42, ["nested", null], "from-lua"]);
    expect(await script.exec([k("lua")], ["again"])).toEqual(["again", 42, ["nested", null], "again"]);
    await expect(raw.eval("return redis.error_reply('MYERR custom')", [], [])).rejects.toThrow(/MYERR custom/);
  });

  it("refuses a wrong or missing token with 401", async () => {
    const wrong = new Redis({ url: stack.restUrl, token: "wrong-token", enableTelemetry: false, retry: false });
    await expect(wrong.get(k("unicode"))).rejects.toThrow(errors.UpstashError);
    await expect(wrong.get(k("unicode"))).rejects.toThrow(/Unauthorized/);
    const res = await fetch(stack.restUrl, { method: "POST", body: JSON.stringify(["PING"]) });
    expect(res.status).toBe(401);
  });

  it("answers 1,000 concurrent requests, each correctly", async () => {
    const results = await Promise.all(
      Array.from({ length: 1000 }, async (_, i) => {
        await raw.set(k(`c${i}`), `value-${i}`);
        return raw.get(k(`c${i}`));
      }),
    );
    results.forEach((value, i) => expect(value).toBe(`value-${i}`));
  });

  it("speaks the path form and reports bad bodies and refused commands as Upstash errors", async () => {
    const got = await fetch(`${stack.restUrl}/get/${encodeURIComponent(k("unicode"))}`, {
      headers: { authorization: `Bearer ${stack.restToken}` },
    });
    expect(((await got.json()) as { result: string }).result).toMatch(/^héllo/);
    const bad = await post("/", "{not json");
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ error: expect.stringMatching(/^ERR/) });
    const refused = await post("/", ["SUBSCRIBE", "news"]);
    expect(refused.status).toBe(400);
    expect(await refused.json()).toEqual({ error: "ERR Command is not allowed: SUBSCRIBE" });
    const wrongType = await post("/", ["LPUSH", k("unicode"), "x"]);
    expect(wrongType.status).toBe(400);
    expect(((await wrongType.json()) as { error: string }).error).toMatch(/^WRONGTYPE/);
    const statusReply = await post("/", ["TYPE", k("unicode")], { "upstash-encoding": "base64" });
    expect(await statusReply.json()).toEqual({ result: Buffer.from("string").toString("base64") });
  });
});

describe("limits and failures", () => {
  it("answers 413 over the request size limit", async () => {
    const server = await startRestServer({
      ...DEFAULT_REST_OPTIONS,
      redisUrl: stack.redisUrl,
      port: 0,
      token: "t",
      maxBodyBytes: 1024,
    });
    try {
      const res = await fetch(server.url, {
        method: "POST",
        headers: { authorization: "Bearer t" },
        body: JSON.stringify(["SET", k("big"), "x".repeat(5000)]),
      });
      expect(res.status).toBe(413);
      expect(((await res.json()) as { error: string }).error).toMatch(/max request size/);
    } finally {
      await server.close();
    }
  });

  it("answers 503 quickly when Redis is unreachable", async () => {
    const deadPort = await freePort();
    const server = await startRestServer({
      ...DEFAULT_REST_OPTIONS,
      redisUrl: `redis://127.0.0.1:${deadPort}`,
      port: 0,
      token: "t",
    });
    try {
      const res = await fetch(server.url, { method: "POST", headers: { authorization: "Bearer t" }, body: '["PING"]' });
      expect(res.status).toBe(503);
      expect(((await res.json()) as { error: string }).error).toMatch(/Redis is unavailable/);
    } finally {
      await server.close();
    }
  });

  it.each(["SIGTERM", "SIGINT"] as const)(
    "`npm run redis-rest` prints its URL once ready and stops on %s",
    async (signal) => {
      const port = await freePort();
      const child = spawn("npm", ["run", "-s", "redis-rest"], {
        env: { ...process.env, REDIS_URL: stack.redisUrl, REST_PORT: String(port), REST_TOKEN: "proc-token" },
        stdio: ["ignore", "pipe", "pipe"],
        detached: true,
      });
      const rest = watchProcess(child, "npm run redis-rest");
      try {
        expect(await rest.waitForLine(/redis-rest: ready at/)).toContain(
          `redis-rest: ready at http://127.0.0.1:${port}`,
        );
        const client = new Redis({ url: `http://127.0.0.1:${port}`, token: "proc-token", enableTelemetry: false });
        expect(await client.ping()).toBe("PONG");
      } finally {
        // Signal the process group: npm forwards nothing reliably, the real server must stop itself.
        if (child.exitCode === null && child.signalCode === null) process.kill(-(child.pid as number), signal);
      }
      const { code } = await rest.exited;
      expect(code === 0 || code === null).toBe(true);
      await rest.waitForLine(new RegExp(`^redis-rest: ${signal}, stopping`));
    },
  );
});
