import { pythonExecutor } from "./python.js";
import { registerExecutor } from "./registry.js";
import { shExecutor } from "./sh.js";

export { executorFor, registerExecutor, registeredScriptTypes } from "./registry.js";
export type { ExecutionOutcome, ExecutionRequest, Executor } from "./registry.js";
export { parseResult, processExecutor, readResultFile } from "./process.js";
export type { ScriptCommand } from "./process.js";
export { pythonExecutor } from "./python.js";
export { shExecutor } from "./sh.js";

/** Registers the built-in executors (`python`, `sh`); other script types plug in with registerExecutor. */
export function registerBuiltinExecutors(): void {
  registerExecutor("python", pythonExecutor());
  registerExecutor("sh", shExecutor());
}
