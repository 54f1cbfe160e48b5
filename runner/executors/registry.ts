import type { Log, ResultMap, RunnerJob } from "../../shared/model/index.js";

/** What an executor gets for one attempt of a job. */
export interface ExecutionRequest {
  /** The job as the coordinator embedded it in the message (env_vars already merged). */
  job: RunnerJob;
  /** A fresh, empty directory of this attempt alone; the runner removes it afterwards. */
  workDir: string;
  /** The complete environment to run in (job env_vars, PATH/HOME, RESULT_FILE). */
  env: Record<string, string>;
  /** Where the job writes its result (see executors/process.ts for the format). */
  resultFile: string;
  /** Where the job may write jobs to add to its flow (a JSON list; executors/process.ts). */
  jobsFile?: string;
  /** Seconds before the job is killed; 0 means no limit. */
  timeoutSeconds: number;
  /** Call once the job's process is running: the runner reports `started` then. */
  onStart(): void;
  /** Call with every complete line the job prints. */
  onLine(stream: Log["stream"], line: string): void;
  /** Aborted when the job must end now (its attempt went stale, the runner is stopping); the reason says why. */
  signal: AbortSignal;
}

/**
 * How an attempt ended: `finished` with a result map (and jobs to add to its flow, if it wrote
 * any), or `error` with a reason.
 */
export type ExecutionOutcome =
  | { status: "finished"; result: ResultMap; jobs?: Record<string, unknown>[] }
  | { status: "error"; error: string; result?: ResultMap };

/** Runs jobs of one script type. Must not throw for a failing job: return an `error` outcome. */
export interface Executor {
  run(request: ExecutionRequest): Promise<ExecutionOutcome>;
}

// One registry per process: executors are code, chosen when the runner starts, so a module-level
// map keeps plugging in a new script type to one call.
const executors = new Map<string, Executor>();

/** Registers (or replaces) the executor of a script type. */
export function registerExecutor(scriptType: string, executor: Executor): void {
  executors.set(scriptType, executor);
}

/** The executor of a script type, if one is registered. */
export function executorFor(scriptType: string): Executor | undefined {
  return executors.get(scriptType);
}

/** The script types that have an executor. */
export function registeredScriptTypes(): string[] {
  return [...executors.keys()];
}
