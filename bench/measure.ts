import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseRedisUrl, RedisConnection } from "../infra/redis-rest/connection.js";
import { commandDelta } from "../test/support/private-stack.js";

// What the benchmark reads besides the clock: Redis's own command counts, read on a connection
// of the benchmark's own straight to redis-server (so reading them goes through neither the REST
// endpoint nor ioredis, the two places commands sent are counted), and CPU time from /proc.

/** Wall-clock time in milliseconds since the epoch, with sub-millisecond resolution. */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Executed commands by name (INFO commandstats: script internals included), and their total. */
export interface CommandCount {
  total: number;
  byCommand: Record<string, number>;
}

/** Commands run by redis-server, as INFO commandstats counts them, read on a connection of our own. */
export class RedisCounter {
  private constructor(private readonly connection: RedisConnection) {}

  static async open(redisUrl: string): Promise<RedisCounter> {
    return new RedisCounter(await RedisConnection.open(parseRedisUrl(redisUrl), 2_000));
  }

  /** A section of INFO, as text. */
  async info(section: string): Promise<string> {
    const [reply] = await this.connection.send([["INFO", section]]);
    return Buffer.isBuffer(reply) ? reply.toString("utf8") : "";
  }

  /** Calls per command since redis-server started, without INFO (only the benchmark sends it). */
  async read(): Promise<Map<string, number>> {
    const [reply] = await this.connection.send([["INFO", "commandstats"]]);
    const counts = new Map<string, number>();
    const text = Buffer.isBuffer(reply) ? reply.toString("utf8") : "";
    for (const line of text.split("\n")) {
      const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
      if (m && m[1] !== "info") counts.set(m[1] as string, Number(m[2]));
    }
    return counts;
  }

  /**
   * The counts once redis-server has gone quiet: the same total `reads` times in a row,
   * `intervalMs` apart. Work a system does after its last visible effect (a Worker's waitUntil,
   * BullMQ's event trimming) is counted this way too.
   */
  async quiet(reads = 4, intervalMs = 150, timeoutMs = 60_000): Promise<Map<string, number>> {
    const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
    const deadline = Date.now() + timeoutMs;
    let last = await this.read();
    let same = 1;
    while (same < reads) {
      if (Date.now() > deadline) throw new Error(`redis-server did not go quiet within ${timeoutMs} ms`);
      await sleep(intervalMs);
      const next = await this.read();
      same = total(next) === total(last) ? same + 1 : 1;
      last = next;
    }
    return last;
  }

  close(): void {
    this.connection.close();
  }
}

/** What ran between two readings of INFO commandstats (the same sum the tests make). */
export const executedBetween: (before: Map<string, number>, after: Map<string, number>) => CommandCount = commandDelta;

const ticksPerSecond = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** One process as /proc shows it. */
interface ProcStat {
  pid: number;
  ppid: number;
  comm: string;
  /** User plus system CPU time, in ms. */
  cpuMs: number;
}

function procStat(pid: number): ProcStat | undefined {
  try {
    const text = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name is in parentheses and may hold spaces: split after its closing one.
    const close = text.lastIndexOf(")");
    const comm = text.slice(text.indexOf("(") + 1, close);
    const fields = text.slice(close + 2).split(" ");
    // fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
    const ticks = Number(fields[11]) + Number(fields[12]);
    return { pid, ppid: Number(fields[1]), comm, cpuMs: (ticks * 1000) / ticksPerSecond };
  } catch {
    return undefined; // gone meanwhile
  }
}

/**
 * The process listening on `port` of 127.0.0.1 (wrangler dev's proxy answers the Worker's own
 * address), from `ss`; undefined when it cannot be told.
 */
export function listenerPid(port: number): number | undefined {
  try {
    const out = execFileSync("ss", ["-ltnpH", `sport = :${port}`], { encoding: "utf8" });
    const m = /pid=(\d+)/.exec(out);
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** Every process descending from `root`, found by walking /proc's parent links. */
function descendants(root: number): ProcStat[] {
  const all = readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map((name) => procStat(Number(name)))
    .filter((p): p is ProcStat => p !== undefined);
  const found: ProcStat[] = [];
  const parents = new Set([root]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const p of all) {
      if (!parents.has(p.pid) && parents.has(p.ppid)) {
        parents.add(p.pid);
        found.push(p);
        grew = true;
      }
    }
  }
  return found;
}

/** CPU time used so far, in ms, by process role ("bench" is this process: the REST endpoint, the clients, BullMQ). */
export type CpuSample = Record<string, number>;

/**
 * CPU time (user + system) of this process and every process it started, by role: `bench` (this
 * process, read with process.cpuUsage), `redis-server`, `workerd` (the Worker's), `proxy` (the
 * workerd of wrangler dev's proxy in front of it, `proxyPid`; production has none), `runner` (the
 * pid given), `wrangler` (the rest of wrangler dev's node processes) and `other`.
 */
export function cpuSample(runnerPid?: number, proxyPid?: number): CpuSample {
  const usage = process.cpuUsage();
  const sample: CpuSample = { bench: (usage.user + usage.system) / 1000 };
  for (const p of descendants(process.pid)) {
    const role =
      p.pid === runnerPid
        ? "runner"
        : p.pid === proxyPid
          ? "proxy"
          : p.comm === "redis-server"
            ? "redis-server"
            : p.comm.startsWith("workerd")
              ? "workerd"
              : p.comm === "node" || p.comm.startsWith("esbuild")
                ? "wrangler"
                : "other";
    sample[role] = (sample[role] ?? 0) + p.cpuMs;
  }
  return sample;
}

/** CPU used between two samples, by role, for the roles in `roles` (all when omitted), with a `total`. */
export function cpuBetween(before: CpuSample, after: CpuSample, roles?: readonly string[]): Record<string, number> {
  const used: Record<string, number> = {};
  let total = 0;
  for (const [role, ms] of Object.entries(after)) {
    if (roles && !roles.includes(role)) continue;
    const delta = Math.max(0, ms - (before[role] ?? 0));
    used[role] = delta;
    total += delta;
  }
  return { ...used, total };
}

/**
 * When the `n`-th of some times was recorded, once it has been: `times` is read again each time
 * a watcher in `watchers` is called; rejects after `timeoutMs`, saying `what` had come.
 */
export function nthTime(
  watchers: Set<() => void>,
  times: () => number[],
  n: number,
  timeoutMs: number,
  what: (count: number) => string,
): Promise<number> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const seen = times();
      if (seen.length >= n) {
        watchers.delete(check);
        clearTimeout(timer);
        resolve(seen[n - 1] as number);
      }
    };
    const timer = setTimeout(() => {
      watchers.delete(check);
      reject(new Error(what(times().length)));
    }, timeoutMs);
    watchers.add(check);
    check();
  });
}

/** The machine, and the versions measured, as the table's caption and the JSON state them. */
export function machine(root: string) {
  const versionOf = (pkg: string) =>
    (JSON.parse(readFileSync(path.join(root, "node_modules", pkg, "package.json"), "utf8")) as { version: string })
      .version;
  const cpus = os.cpus();
  return {
    cores: cpus.length,
    cpu: cpus[0]?.model.trim() ?? "unknown",
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    bullmq: versionOf("bullmq"),
    ioredis: versionOf("ioredis"),
    wrangler: versionOf("wrangler"),
    loadAverageAtStart: os.loadavg(),
  };
}
