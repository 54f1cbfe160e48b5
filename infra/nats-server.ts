import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";

/** A nats-server child process of ours, with JetStream on and its store in a folder of ours. */
export interface NatsServerProcess {
  url: string;
  port: number;
  child: ChildProcess;
  /** Stops it the way a service manager does (SIGTERM: JetStream flushes its store). */
  stop(): Promise<void>;
  /** Kills it (SIGKILL). */
  kill(): Promise<void>;
}

/** Debian's package puts the binary in /usr/sbin, which is not on every user's PATH. */
const DEBIAN_BINARY = "/usr/sbin/nats-server";

/** The nats-server binary to run, or undefined when it is not installed. */
export function natsServerBinary(): string | undefined {
  if (spawnSync("nats-server", ["--version"], { stdio: "ignore" }).status === 0) return "nats-server";
  return existsSync(DEBIAN_BINARY) ? DEBIAN_BINARY : undefined;
}

/**
 * Starts `nats-server` with JetStream on 127.0.0.1:`port`, its store in `dir` (kept across a
 * restart on the same folder, as a real deployment's), and resolves once it takes connections.
 */
export async function startNatsServer(options: { port: number; dir: string }): Promise<NatsServerProcess> {
  const binary = natsServerBinary();
  if (!binary) throw new Error("nats-server is not installed (Debian: sudo apt-get install nats-server)");
  mkdirSync(options.dir, { recursive: true });
  const child = spawn(binary, ["-js", "-a", "127.0.0.1", "-p", String(options.port), "-sd", options.dir], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const deadline = Date.now() + 15_000;
  while (!output.includes("Server is ready")) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`nats-server did not start on port ${options.port}:\n${output.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const end = async (signal: NodeJS.Signals) => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill(signal);
      await exited;
    }
  };
  return {
    url: `nats://127.0.0.1:${options.port}`,
    port: options.port,
    child,
    stop: () => end("SIGTERM"),
    kill: () => end("SIGKILL"),
  };
}
