import { pythonExecutor } from "./python.js";
import { executorFor, registerExecutor } from "./registry.js";
import { shExecutor } from "./sh.js";

export { executorFor, registerExecutor, registeredScriptTypes } from "./registry.js";
export type { ExecutionOutcome, ExecutionRequest, Executor } from "./registry.js";
export { parseResult, processExecutor, readResultFile } from "./process.js";
export type { ScriptCommand } from "./process.js";
export { pythonExecutor } from "./python.js";
export { shExecutor } from "./sh.js";

/**
 * Registers the built-in executors (`python`, `sh`) where no executor is registered under their
 * names yet, so one plugged in with registerExecutor before (or after) wins. startRunner calls it.
 */
export function registerBuiltinExecutors(): void {
  if (!executorFor("python")) registerExecutor("python", pythonExecutor());
  if (!executorFor("sh")) registerExecutor("sh", shExecutor());
}
