import { createHash } from "node:crypto";
import { readdirSync } from "node:fs";
import net from "node:net";
import path from "node:path";
import { parseRedisUrl, RedisConnection } from "../../infra/redis-rest/connection.js";
import { ErrorReply } from "../../infra/redis-rest/resp.js";
import { LuaScript } from "../../shared/store/script.js";

// What the project's Lua scripts touch, seen by Redis itself: MONITOR prints every script call
// (EVAL / EVALSHA with its KEYS) and, right after it, each command the script ran (`[0 lua]`),
// with nothing in between (a script runs alone). Each command's keys are asked of Redis
// (COMMAND GETKEYS), so no table of key positions is kept here.

/** One script call as a master ran it: the script's SHA-1, the KEYS it was given, the commands it ran. */
export interface ScriptRun {
  sha: string;
  keys: string[];
  calls: Buffer[][];
}

/** Every LuaScript of shared/store/scripts, by the SHA-1 Redis knows it by. */
export async function projectScripts(): Promise<Map<string, string>> {
  const dir = path.resolve(import.meta.dirname, "../../shared/store/scripts");
  const scripts = new Map<string, string>();
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".ts"))) {
    const module = (await import(path.join(dir, file))) as Record<string, unknown>;
    for (const value of Object.values(module)) {
      if (value instanceof LuaScript) scripts.set(sha1(value.source), value.name);
    }
  }
  return scripts;
}

function sha1(text: string): string {
  return createHash("sha1").update(text).digest("hex");
}

/** MONITOR on some nodes, gathering the script calls they run until `stop`. */
export class ScriptMonitor {
  private readonly runs: ScriptRun[] = [];

  private constructor(private readonly sockets: net.Socket[]) {}

  /** Starts monitoring the nodes on `ports`; resolves once each said OK. */
  static async start(ports: number[]): Promise<ScriptMonitor> {
    const sockets: net.Socket[] = [];
    const monitor = new ScriptMonitor(sockets);
    await Promise.all(ports.map((port) => monitor.watch(port).then((s) => sockets.push(s))));
    return monitor;
  }

  /** Stops monitoring; resolves with every script call seen. */
  stop(): ScriptRun[] {
    for (const socket of this.sockets) socket.destroy();
    return this.runs;
  }

  private watch(port: number): Promise<net.Socket> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ port, host: "127.0.0.1" });
      let buffered = "";
      let current: ScriptRun | undefined;
      socket.once("error", reject);
      socket.once("connect", () => socket.write("MONITOR\r\n"));
      socket.on("data", (chunk: Buffer) => {
        buffered += chunk.toString("latin1");
        const lines = buffered.split("\r\n");
        buffered = lines.pop() ?? "";
        for (const line of lines) {
          if (line === "+OK") resolve(socket);
          const parsed = parseMonitorLine(line);
          if (!parsed) continue;
          const name = parsed.args[0]?.toString("latin1").toUpperCase() ?? "";
          if (parsed.lua && current) current.calls.push(parsed.args);
          else if (!parsed.lua && (name === "EVAL" || name === "EVALSHA")) {
            const [, body, count] = parsed.args.map((a) => a.toString("utf8"));
            const keys = parsed.args.slice(3, 3 + Number(count)).map((k) => k.toString("utf8"));
            current = { sha: name === "EVAL" ? sha1(body ?? "") : (body ?? ""), keys, calls: [] };
            this.runs.push(current);
          } else if (!parsed.lua) current = undefined;
        }
      });
    });
  }
}

/**
 * A MONITOR line: `<time> [<db> <client or lua>] "arg" "arg" …`, each argument quoted with C
 * escapes (`\"`, `\\`, `\n`, `\xHH` for bytes that do not print).
 */
export function parseMonitorLine(line: string): { lua: boolean; args: Buffer[] } | undefined {
  const m = /^\+\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
  if (!m) return undefined;
  const text = m[2] as string;
  const args: Buffer[] = [];
  let i = 0;
  while (i < text.length) {
    if (text[i] !== '"') {
      i++;
      continue;
    }
    const bytes: number[] = [];
    for (i++; i < text.length && text[i] !== '"'; i++) {
      if (text[i] !== "\\") {
        bytes.push(text.charCodeAt(i));
        continue;
      }
      const next = text[++i] as string;
      if (next === "x") {
        bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
        i += 2;
      } else bytes.push(({ n: 10, r: 13, t: 9, a: 7, b: 8 } as Record<string, number>)[next] ?? next.charCodeAt(0));
    }
    i++;
    args.push(Buffer.from(bytes));
  }
  return { lua: m[1] === "lua", args };
}

/** What the runs showed: the scripts that ran, and every key a script touched without being given it. */
export interface AuditResult {
  ran: Set<string>;
  undeclared: string[];
}

/**
 * Checks each run: every key its commands touched (COMMAND GETKEYS, asked of the node at `port`)
 * is one of its KEYS, or else was found by a SCAN of the same run whose MATCH pattern is one hash
 * tag's namespace (a context's keys, all in KEYS[1]'s slot: deleteNamespace's way).
 */
export async function auditRuns(runs: ScriptRun[], names: Map<string, string>, port: number): Promise<AuditResult> {
  const connection = await RedisConnection.open(parseRedisUrl(`redis://127.0.0.1:${port}`), 2_000);
  try {
    const ran = new Set<string>();
    const undeclared: string[] = [];
    for (const run of runs) {
      const name = names.get(run.sha) ?? `script ${run.sha}`;
      ran.add(name);
      const declared = new Set(run.keys);
      const scanned = run.calls
        .filter((c) => c[0]?.toString().toUpperCase() === "SCAN")
        .map((c) => c[c.findIndex((a) => a.toString().toUpperCase() === "MATCH") + 1]?.toString() ?? "")
        .filter(
          (pattern) => /\{[^}]+\}/.test(pattern) && pattern.startsWith(run.keys[0]?.replace(/\}.*$/, "}") ?? "\0"),
        );
      const replies =
        run.calls.length > 0 ? await connection.send(run.calls.map((c) => ["COMMAND", "GETKEYS", ...c])) : [];
      replies.forEach((reply, i) => {
        if (reply instanceof ErrorReply) {
          if (!/no key arguments/.test(reply.message)) undeclared.push(`${name}: ${reply.message}`);
          return;
        }
        for (const key of (reply as Buffer[]).map((k) => k.toString("utf8"))) {
          if (declared.has(key)) continue;
          if (scanned.some((pattern) => key.startsWith(pattern.replace(/\*$/, "").replace(/\\(.)/g, "$1")))) continue;
          undeclared.push(
            `${name}: ${run.calls[i]?.[0]?.toString()} ${key} (KEYS: ${run.keys.slice(0, 4).join(", ")}…)`,
          );
        }
      });
    }
    return { ran, undeclared };
  } finally {
    connection.close();
  }
}
