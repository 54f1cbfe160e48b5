import http from "node:http";
import { parseRedisUrl, RedisConnection } from "../../infra/redis-rest/connection.js";
import { Keys } from "../../shared/keys.js";
import { eventually } from "./eventually.js";

/** A stand-in on the REST endpoint's port that refuses every request, and what it was asked. */
export interface Refusal {
  bodies: string[];
  close(): Promise<void>;
}

/**
 * Answers on `port` as the REST endpoint does when Redis is down (503, `ERR Redis is
 * unavailable`), keeping each request's body: what the Worker tried to do meanwhile.
 */
export async function refuseOn(port: number): Promise<Refusal> {
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString()));
    req.on("end", () => {
      bodies.push(body);
      res
        .writeHead(503, { "content-type": "application/json" })
        .end(JSON.stringify({ error: "ERR Redis is unavailable: refused by the test" }));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  return {
    bodies,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** Reads the global counters' fields asked for (their values as stored, or null). */
export type CounterReader = (fields: string[]) => Promise<(string | null)[]>;

/**
 * Fires the cron trigger of the Worker at `workerUrl` once and waits for the whole sweep: the run
 * (it answers before its work is done) and the sweep of every context it handed to a dispatcher
 * (the global counters `swept` and `settled`, read straight from the redis-server at `redis`, so
 * no count of commands sent is disturbed; or by the reader given, for a stack over a Redis
 * Cluster). Resolves with the contexts handed over.
 */
export async function sweepToEnd(workerUrl: string, redis: string | CounterReader, timeoutMs: number): Promise<number> {
  const connection = typeof redis === "string" ? await RedisConnection.open(parseRedisUrl(redis), 2_000) : undefined;
  const read: CounterReader =
    typeof redis === "string"
      ? async (fields) => {
          const [reply] = await (connection as RedisConnection).send([["HMGET", new Keys("").counters(), ...fields]]);
          return (reply as (Buffer | null)[]).map((v) => v?.toString() ?? null);
        }
      : redis;
  const counters = async () => {
    const [sweeps, swept, settled] = (await read(["sweeps", "swept", "settled"])).map((v) => Number(v ?? 0));
    return { sweeps: sweeps ?? 0, swept: swept ?? 0, settled: settled ?? 0 };
  };
  try {
    const before = await counters();
    const fired = await fetch(`${workerUrl}/__scheduled?cron=*+*+*+*+*`);
    if (fired.status !== 200) throw new Error(`the scheduled handler answered ${fired.status}: ${await fired.text()}`);
    const ran = await eventually(
      async () => ((c) => (c.sweeps > before.sweeps ? c : undefined))(await counters()),
      timeoutMs,
      50,
      "the sweep's run",
    );
    const handed = ran.swept - before.swept;
    await eventually(
      async () => ((await counters()).settled - before.settled >= handed ? true : undefined),
      timeoutMs,
      50,
      `the sweeps of ${handed} context(s)`,
    );
    return handed;
  } finally {
    connection?.close();
  }
}

/**
 * Holds every client's commands of the redis-server at `redisUrl` for `ms` (CLIENT PAUSE … ALL),
 * or only those that write (`WRITE`: reads are answered, scripts are held, as every EVALSHA).
 */
export async function pauseClients(redisUrl: string, ms: number, mode: "ALL" | "WRITE" = "ALL"): Promise<void> {
  const connection = await RedisConnection.open(parseRedisUrl(redisUrl), 2_000);
  try {
    await connection.send([["CLIENT", "PAUSE", String(ms), mode]]);
  } finally {
    connection.close();
  }
}
