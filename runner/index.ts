/** The reference external runner, as a library: start one in-process, or plug in executors. */
export { startRunner, consoleLog } from "./runner.js";
export type { RunnerHandle, RunnerOptions } from "./runner.js";
export type { RunnerLog } from "./job.js";
export { readConfig, USAGE } from "./config.js";
export {
  executorFor,
  parseResult,
  processExecutor,
  pythonExecutor,
  readResultFile,
  registerBuiltinExecutors,
  registerExecutor,
  registeredScriptTypes,
  shExecutor,
} from "./executors/index.js";
export type { ExecutionOutcome, ExecutionRequest, Executor, ScriptCommand } from "./executors/index.js";
export { startFleetRunner, fleetNames, DEFAULT_FLEET_SETUP, ensureFleet } from "./fleet/index.js";
export type { FleetOptions, FleetNames, FleetSetup } from "./fleet/index.js";
