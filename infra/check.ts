import { spawn } from "node:child_process";
import { availableParallelism } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * `npm run check`: the checks `npm test` runs before its tests (format, every TypeScript project's
 * typecheck, lint), run side by side, as many at once as the machine has cores.
 * `npm run typecheck` is `check.ts typecheck`: only the checks whose name starts so.
 *
 * Each is a process of its own and mostly one thread (tsc, eslint, prettier), and one after
 * another they left one of CI's two cores idle for two minutes before the first test started.
 * Their output is held and printed whole, check by check in the order below, so it reads as
 * `npm run format:check && npm run typecheck && npm run lint` did; it exits 1 if any failed
 * (after all of them ran: every failure is told at once), naming them.
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name: string) => path.join(root, "node_modules", ".bin", name);

/** The TypeScript projects `npm run typecheck` checks, one `tsc -p` each. */
const TS_PROJECTS = [".", "functions", "test/worker", "console", "bench/floor-worker", "infra/serve/front"];

interface Check {
  name: string;
  command: string;
  args: string[];
}

/** Longest first (lint, with type information: about as long as every typecheck together), so the rest fill in beside it. */
const CHECKS: Check[] = [
  { name: "lint", command: bin("eslint"), args: ["."] },
  ...TS_PROJECTS.map((p) => ({ name: `typecheck ${p}`, command: bin("tsc"), args: ["-p", p] })),
  { name: "format", command: bin("prettier"), args: ["--check", "."] },
];

interface Outcome {
  check: Check;
  code: number | null;
  output: string;
  ms: number;
}

/** Runs one check to its end, holding what it prints. */
function run(check: Check): Promise<Outcome> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(check.command, check.args, { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.on("error", (error) => resolve({ check, code: 1, output: `${output}${String(error)}\n`, ms: 0 }));
    child.on("close", (code) => resolve({ check, code, output, ms: Date.now() - started }));
  });
}

/** Runs every check, at most `width` at once; the outcomes in the checks' own order. */
async function runAll(checks: Check[], width: number): Promise<Outcome[]> {
  const outcomes: Outcome[] = new Array<Outcome>(checks.length);
  let next = 0;
  const lane = async () => {
    while (next < checks.length) {
      const i = next++;
      outcomes[i] = await run(checks[i] as Check);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, checks.length) }, lane));
  return outcomes;
}

const started = Date.now();
const only = process.argv[2];
const outcomes = await runAll(
  CHECKS.filter((c) => !only || c.name.startsWith(only)),
  Math.max(1, availableParallelism()),
);
for (const { check, code, output, ms } of outcomes) {
  console.log(`> ${check.name}: ${code === 0 ? "passed" : "FAILED"} (${(ms / 1000).toFixed(1)} s)`);
  if (output.trim() !== "" && (code !== 0 || check.name === "format")) console.log(output.trimEnd());
}
const failed = outcomes.filter((o) => o.code !== 0).map((o) => o.check.name);
console.log(
  `checks: ${failed.length === 0 ? "all passed" : `${failed.join(", ")} failed`} in ${((Date.now() - started) / 1000).toFixed(1)} s`,
);
process.exit(failed.length === 0 ? 0 : 1);
