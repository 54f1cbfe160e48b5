import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import net from "node:net";

/** A redis-server child process of ours. */
export interface RedisServerProcess {
  url: string;
  port: number;
  child: ChildProcess;
  stop(): Promise<void>;
}

/** Raised when redis-server is not installed; the message says what to install. */
export class RedisServerMissingError extends Error {
  override name = "RedisServerMissingError";
  constructor() {
    super(
      "redis-server is not installed. Install Debian's package (sudo apt-get install redis-server), " +
        "or point REDIS_URL at a running Redis.",
    );
  }
}

/** True when a `redis-server` binary is on the PATH. */
export function hasRedisServer(): boolean {
  return spawnSync("redis-server", ["--version"], { stdio: "ignore" }).status === 0;
}

/** Finds a TCP port nobody listens on right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts `redis-server` on `port` with `dir` as its working folder, keeping nothing on disk
 * (no RDB snapshots, no AOF), and resolves once it answers PING. `args` are further settings
 * (`--cluster-enabled yes`, say: a cluster node keeps its node table in `dir`).
 */
export async function startRedisServer(options: {
  port: number;
  dir: string;
  args?: string[];
}): Promise<RedisServerProcess> {
  if (!hasRedisServer()) throw new RedisServerMissingError();
  mkdirSync(options.dir, { recursive: true });
  const child = spawn(
    "redis-server",
    [
      ...["--port", String(options.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
      ...["--dir", options.dir, ...(options.args ?? [])],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));

  const deadline = Date.now() + 10_000;
  while (!(await answersPing(options.port))) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`redis-server did not start on port ${options.port}:\n${output.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    url: `redis://127.0.0.1:${options.port}`,
    port: options.port,
    child,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        await exited;
      }
    },
  };
}

/** Sends a bare PING and reports whether `+PONG` came back. */
export function answersPing(port: number, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(500, () => done(false));
    socket.once("error", () => done(false));
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.once("data", (data) => done(data.toString().startsWith("+PONG")));
  });
}
