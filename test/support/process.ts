import { spawn, type ChildProcess, type SpawnOptions } from "node:child_process";

/** A child process whose output is collected as it comes, line by line. */
export interface WatchedProcess {
  child: ChildProcess;
  /** Everything it printed on stdout so far. */
  stdout(): string;
  /** Everything it printed on stderr so far (empty when stderr is not piped). */
  stderr(): string;
  /** stdout and stderr together, in the order the chunks arrived. */
  output(): string;
  /**
   * Resolves with the first complete stdout or stderr line matching `pattern`, printed already
   * or to come; fails when the process ends without printing one, or after `timeoutMs`.
   */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
  /** Resolves when the process exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Kills it (SIGKILL) if still running and waits for its exit; for cleanup. */
  kill(): Promise<void>;
}

/**
 * Watches `child`'s piped stdout and stderr. `name` says whose output a failure shows. Only
 * complete lines are matched (a chunk can end mid-line), and what is left without a newline once
 * the streams close.
 */
export function watchProcess(child: ChildProcess, name: string): WatchedProcess {
  const printed = { out: "", err: "" };
  let all = "";
  const lines: string[] = [];
  const partial = { out: "", err: "" };
  let closed = false;
  const watchers = new Set<() => void>();
  const notify = () => watchers.forEach((w) => w());
  const take = (stream: "out" | "err", chunk: Buffer) => {
    const text = chunk.toString();
    printed[stream] += text;
    all += text;
    const pieces = (partial[stream] + text).split("\n");
    partial[stream] = pieces.pop() ?? "";
    lines.push(...pieces);
    notify();
  };
  child.stdout?.on("data", (chunk: Buffer) => take("out", chunk));
  child.stderr?.on("data", (chunk: Buffer) => take("err", chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  child.once("close", () => {
    for (const stream of ["out", "err"] as const) {
      if (partial[stream] !== "") lines.push(partial[stream]);
      partial[stream] = "";
    }
    closed = true;
    notify();
  });
  const shown = () => `${name} printed:\n${all}`;

  return {
    child,
    stdout: () => printed.out,
    stderr: () => printed.err,
    output: () => all,
    exited,
    waitForLine: (pattern, timeoutMs = 30_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const line = lines.find((l) => pattern.test(l));
          if (line !== undefined) {
            done();
            resolve(line);
          } else if (closed) {
            done();
            reject(
              new Error(
                `${name} ended (exit code ${child.exitCode}, signal ${child.signalCode}) without printing ${pattern}; ${shown()}`,
              ),
            );
          }
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`${name} did not print ${pattern} within ${timeoutMs} ms; ${shown()}`));
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

/** What a process that ran to its end printed, and its exit code. */
export interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr together, in the order the chunks arrived. */
  output: string;
}

/**
 * Runs `command args` to its end and collects its output. A process still running after
 * `timeoutMs` is sent `killSignal` (SIGKILL unless told): a hung command is a failure to report,
 * not a test run to hang.
 */
export function runToEnd(
  command: string,
  args: string[],
  options: SpawnOptions & { timeoutMs?: number; killSignal?: NodeJS.Signals } = {},
): Promise<Finished> {
  const { timeoutMs = 90_000, killSignal = "SIGKILL", ...spawnOptions } = options;
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...spawnOptions, stdio: ["ignore", "pipe", "pipe"] });
    const timer = setTimeout(() => child.kill(killSignal), timeoutMs);
    let stdout = "";
    let stderr = "";
    let output = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      output += chunk.toString();
    });
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
      output += chunk.toString();
    });
    child.once("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.once("close", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, output });
    });
  });
}
