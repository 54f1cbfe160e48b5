import { processExecutor } from "./process.js";
import type { Executor } from "./registry.js";

/** Runs `sh` scripts: the script goes to `script.sh` in the work dir, run as `sh script.sh`. */
export function shExecutor(shell = "sh"): Executor {
  return processExecutor({ fileName: "script.sh", command: (script) => ({ file: shell, args: [script] }) });
}
