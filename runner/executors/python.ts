import { processExecutor } from "./process.js";
import type { Executor } from "./registry.js";

/**
 * Runs `python` scripts: the script goes to `script.py` in the work dir, run as
 * `python3 -u script.py` (unbuffered, so its lines reach the logs as they are printed).
 */
export function pythonExecutor(interpreter = "python3"): Executor {
  return processExecutor({ fileName: "script.py", command: (script) => ({ file: interpreter, args: ["-u", script] }) });
}
