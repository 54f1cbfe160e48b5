import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * `npm test`: the checks (`npm run check`: format, every typecheck, lint) and every test
 * (`vitest run`), at once. Exits 1 if either failed, after both ended, so every failure is told.
 *
 * Why at once: the checks took 2–3 minutes of both of CI's cores before the first test started,
 * and the tests leave about a sixth of the two cores idle (files waiting on alarms, deadlines
 * and runners; the serial tail at the end). The checks run at the lowest CPU priority (`nice`),
 * so they take what the tests leave rather than slow them: a test that bounds a timing sees the
 * same machine it saw after the checks ended. Their output is held and printed after the
 * tests', as `npm run check` prints it; vitest's streams as usual. Arguments go to vitest
 * (`npm test -- test/unit`).
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** Resolves with a child's exit code once it ended (1 when it died of a signal or never started). */
function ended(child: ChildProcess): Promise<number> {
  return new Promise((resolve) => {
    child.on("error", () => resolve(1));
    child.on("close", (code) => resolve(code ?? 1));
  });
}

/** `npm run check` at the lowest priority, its output held: its exit code and what it printed. */
async function checks(): Promise<{ code: number; output: string }> {
  const child = spawn("nice", ["-n", "19", process.execPath, "--import", "tsx", "infra/check.ts"], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await ended(child);
  return { code, output };
}

/** `vitest run` with the given arguments, its output as it comes. */
function tests(args: string[]): Promise<number> {
  const vitest = path.join(root, "node_modules", ".bin", "vitest");
  return ended(spawn(vitest, ["run", ...args], { cwd: root, stdio: "inherit" }));
}

const args = process.argv.slice(2);
const [checked, tested] = await Promise.all([checks(), tests(args)]);
if (checked.output) console.log(`\n${checked.output.trimEnd()}`);
const failed = [checked.code !== 0 && "checks", tested !== 0 && "tests"].filter(Boolean);
console.log(`npm test: ${failed.length ? `${failed.join(" and ")} failed` : "checks and tests passed"}`);
process.exit(failed.length ? 1 : 0);
