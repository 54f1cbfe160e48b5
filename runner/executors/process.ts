/**
 * Executors that run a job's script as a child process.
 *
 * THE RESULT CHANNEL
 * ------------------
 * A job's environment holds `RESULT_FILE`, a path inside its working directory. To produce a
 * result, the job writes that file, in one of two forms:
 *   - lines `key=value` (the value is everything after the first `=`, kept as it is; empty lines
 *     and lines starting with `#` are skipped; a key given twice keeps the last value), or
 *   - one JSON object (the file's content starts with `{`): string values are kept, other values
 *     are turned into JSON text.
 * The pairs become the job's result map, which the coordinator hands to dependent jobs as
 * `DEP_<JOB>_<KEY>` and inside `FLOW_INPUTS`. No file means an empty result.
 *
 * THE JOBS CHANNEL
 * ----------------
 * `JOBS_FILE` is a second path: a job that writes a JSON list of jobs there (each as a flow file's
 * job, at most ADDED_JOBS_MAX, the file at most 768 KiB) adds them to its own flow with its result
 * (docs/runners.md, "Adding jobs"). No file adds nothing; a file that is not such a list is an
 * error of the attempt.
 *
 * Exit code 0 → `finished` with that result. A non-zero exit code, a signal, a timeout, or an
 * unreadable result file → `error` with the reason ("exit code 3", "killed after timeout of 5 s").
 *
 * Stdout and stderr are not part of the result: they are the job's logs, streamed line by line.
 *
 * The job runs in its own process group (spawned detached) so that ending it ends everything it
 * started: on timeout the whole group gets SIGTERM, then SIGKILL after a grace of 2 s; and once
 * the main process exited, whatever it left running in the group is killed too.
 */
import { spawn } from "node:child_process";
import { readFile, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { StringDecoder } from "node:string_decoder";
import type { Readable } from "node:stream";
import { ADDED_JOBS_MAX, type Log, type ResultMap } from "../../shared/model/index.js";
import type { ExecutionRequest, Executor } from "./registry.js";

/** Between SIGTERM and SIGKILL of a job's process group. */
export const KILL_GRACE_MS = 2_000;
/** Longer lines are cut into pieces, so one runaway line cannot exhaust memory or a log request. */
const MAX_LINE_CHARS = 16 * 1024;
/** A bigger result file is refused rather than read. */
const MAX_RESULT_BYTES = 1024 * 1024;
/** A bigger jobs file is refused: the report that carries it must stay within a request's 1 MiB. */
const MAX_JOBS_BYTES = 768 * 1024;
/** How long to wait for the output pipes to close once the group is gone. */
const PIPE_CLOSE_MS = 2_000;

/** How to run a script: the file to write it to, and the command that runs that file. */
export interface ScriptCommand {
  fileName: string;
  command(scriptPath: string): { file: string; args: string[] };
}

/** An executor that writes the script to a file in the work dir and runs it as a child process. */
export function processExecutor(spec: ScriptCommand): Executor {
  return {
    async run(request) {
      const scriptPath = path.join(request.workDir, spec.fileName);
      await writeFile(scriptPath, request.job.script, { mode: 0o600 });
      const { file, args } = spec.command(scriptPath);
      const ended = await runProcess(file, args, request);
      if (ended.failure) return { status: "error", error: ended.failure };
      try {
        const result = await readResultFile(request.resultFile);
        const jobs = request.jobsFile ? await readJobsFile(request.jobsFile) : undefined;
        return { status: "finished", result, ...(jobs ? { jobs } : {}) };
      } catch (error) {
        return { status: "error", error: (error as Error).message };
      }
    },
  };
}

interface ProcessEnd {
  /** Why the attempt failed; undefined for a clean exit 0. */
  failure?: string;
}

/** Runs one process in its own group, streaming its lines, enforcing timeout and abort. */
function runProcess(file: string, args: string[], request: ExecutionRequest): Promise<ProcessEnd> {
  return new Promise((resolve) => {
    const child = spawn(file, args, {
      cwd: request.workDir,
      env: request.env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let killedFor: string | undefined;
    let graceTimer: NodeJS.Timeout | undefined;
    const killGroup = (signal: NodeJS.Signals) => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, signal); // the negative pid names the whole process group
      } catch {
        // the group is already gone
      }
    };
    const end = (reason: string) => {
      if (killedFor !== undefined) return;
      killedFor = reason;
      killGroup("SIGTERM");
      graceTimer = setTimeout(() => killGroup("SIGKILL"), KILL_GRACE_MS);
    };
    const timeoutTimer =
      request.timeoutSeconds > 0
        ? setTimeout(() => end(`killed after timeout of ${request.timeoutSeconds} s`), request.timeoutSeconds * 1000)
        : undefined;
    const onAbort = () => end(`killed: ${String(request.signal.reason ?? "aborted")}`);
    if (request.signal.aborted) onAbort();
    else request.signal.addEventListener("abort", onAbort, { once: true });

    const pipes = [lines(child.stdout, "stdout", request.onLine), lines(child.stderr, "stderr", request.onLine)];
    child.once("spawn", () => request.onStart());
    const finish = (end: ProcessEnd) => {
      clearTimeout(timeoutTimer);
      clearTimeout(graceTimer);
      request.signal.removeEventListener("abort", onAbort);
      resolve(end);
    };
    child.once("error", (error) => finish({ failure: `could not start ${file}: ${error.message}` }));
    child.once("exit", (code, signal) => {
      // Leftovers of the job (background processes) die with it; they would hold the pipes open.
      killGroup("SIGKILL");
      const closed = Promise.all(pipes);
      const bound = new Promise((r) => setTimeout(r, PIPE_CLOSE_MS).unref());
      void Promise.race([closed, bound]).then(() => {
        if (killedFor !== undefined) finish({ failure: killedFor });
        else if (signal) finish({ failure: `killed by signal ${signal}` });
        else if (code !== 0) finish({ failure: `exit code ${code}` });
        else finish({});
      });
    });
  });
}

/** Splits a stream into lines (UTF-8 safe, long lines cut); resolves when the stream closed. */
function lines(
  stream: Readable,
  name: Log["stream"],
  onLine: (stream: Log["stream"], line: string) => void,
): Promise<void> {
  const decoder = new StringDecoder("utf8");
  let partial = "";
  const emit = (text: string) => {
    for (let i = 0; i < text.length; i += MAX_LINE_CHARS) onLine(name, text.slice(i, i + MAX_LINE_CHARS));
  };
  const take = (text: string) => {
    partial += text;
    let newline;
    while ((newline = partial.indexOf("\n")) >= 0) {
      emit(partial.slice(0, newline).replace(/\r$/, ""));
      partial = partial.slice(newline + 1);
    }
    if (partial.length > MAX_LINE_CHARS) {
      emit(partial.slice(0, MAX_LINE_CHARS));
      partial = partial.slice(MAX_LINE_CHARS);
    }
  };
  stream.on("data", (chunk: Buffer) => take(decoder.write(chunk)));
  return new Promise((resolve) => {
    stream.once("close", () => {
      take(decoder.end());
      if (partial.length > 0) emit(partial);
      partial = "";
      resolve();
    });
  });
}

/** Reads a job's result file (format in the comment at the top); a missing file is an empty result. */
export async function readResultFile(file: string): Promise<ResultMap> {
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch {
    return {};
  }
  if (size > MAX_RESULT_BYTES)
    throw new Error(`RESULT_FILE is ${size} bytes; at most ${MAX_RESULT_BYTES} are accepted`);
  return parseResult(await readFile(file, "utf8"));
}

/** Parses the text of a result file: `key=value` lines, or one JSON object. */
export function parseResult(text: string): ResultMap {
  const result: ResultMap = {};
  if (text.trimStart().startsWith("{")) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new Error(`RESULT_FILE is not valid JSON: ${(error as Error).message}`, { cause: error });
    }
    if (value === null || typeof value !== "object" || Array.isArray(value))
      throw new Error("RESULT_FILE holds JSON that is not an object");
    for (const [key, v] of Object.entries(value)) {
      if (key === "") throw new Error("RESULT_FILE has an empty key");
      result[key] = typeof v === "string" ? v : JSON.stringify(v);
    }
    return result;
  }
  text.split("\n").forEach((raw, index) => {
    const line = raw.replace(/\r$/, "");
    if (line.trim() === "" || line.startsWith("#")) return;
    const eq = line.indexOf("=");
    const key = eq > 0 ? line.slice(0, eq).trim() : "";
    if (key === "") throw new Error(`RESULT_FILE line ${index + 1} is not key=value`);
    result[key] = line.slice(eq + 1);
  });
  return result;
}

/**
 * Reads the jobs a job wrote to add to its flow (format in the comment at the top): undefined
 * when it wrote none.
 */
export async function readJobsFile(file: string): Promise<Record<string, unknown>[] | undefined> {
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch {
    return undefined;
  }
  if (size > MAX_JOBS_BYTES) throw new Error(`JOBS_FILE is ${size} bytes; at most ${MAX_JOBS_BYTES} are accepted`);
  let value: unknown;
  try {
    value = JSON.parse(await readFile(file, "utf8"));
  } catch (error) {
    throw new Error(`JOBS_FILE is not valid JSON: ${(error as Error).message}`, { cause: error });
  }
  if (!Array.isArray(value) || value.some((job) => job === null || typeof job !== "object" || Array.isArray(job)))
    throw new Error("JOBS_FILE holds JSON that is not a list of jobs (objects)");
  if (value.length > ADDED_JOBS_MAX)
    throw new Error(`JOBS_FILE holds ${value.length} jobs; at most ${ADDED_JOBS_MAX} may be added at once`);
  return value.length > 0 ? (value as Record<string, unknown>[]) : undefined;
}
