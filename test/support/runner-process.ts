import { spawn, type ChildProcess } from "node:child_process";

/** A reference runner started as its own process (`node --import tsx runner/main.ts …`). */
export interface RunnerProcess {
  child: ChildProcess;
  /** Everything it printed so far. */
  stdout(): string;
  stderr(): string;
  /** Resolves with the first stdout/stderr line matching `pattern` (already printed or to come). */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves when the process exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Kills it (SIGKILL) if still running; for cleanup. */
  kill(): Promise<void>;
}

/**
 * Starts the runner CLI with `args` from the repository root, with an environment free of the
 * caller's RUNNER_* settings, and collects its output.
 */
export function spawnRunner(root: string, args: string[]): RunnerProcess {
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("RUNNER_")));
  const child = spawn(process.execPath, ["--import", "tsx", "runner/main.ts", ...args], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  const watchers = new Set<() => void>();
  const notify = () => watchers.forEach((w) => w());
  child.stdout?.on("data", (chunk: Buffer) => {
    out += chunk.toString();
    notify();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    err += chunk.toString();
    notify();
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => {
      resolve({ code, signal });
      notify();
    }),
  );
  const find = (pattern: RegExp) => `${out}\n${err}`.split("\n").find((line) => pattern.test(line));

  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited,
    waitForLine: (pattern, timeoutMs = 20_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const line = find(pattern);
          if (line !== undefined) {
            done();
            resolve(line);
          } else if (child.exitCode !== null || child.signalCode !== null) {
            done();
            reject(new Error(`the runner exited before printing ${pattern}:\n${out}\n${err}`));
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`the runner did not print ${pattern} within ${timeoutMs} ms:\n${out}\n${err}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          watchers.delete(check);
        };
        watchers.add(check);
        check();
      }),
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
        await exited;
      }
    },
  };
}
