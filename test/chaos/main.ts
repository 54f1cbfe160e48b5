/**
 * `npm run chaos`: a seeded soak on the real local stack (see soak.ts), minutes long.
 *
 *   npm run chaos -- [--seed <n>] [--minutes <m>]
 *
 * Prints the faults as they are injected and the invariants at the end; exits 1 if any failed.
 * The same seed submits the same flows and injects the same faults in the same order.
 */
import { soak } from "./soak.js";

function option(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? process.argv[at + 1] : undefined;
}

const seed = Number(option("seed") ?? Math.floor(Math.random() * 2 ** 31));
const minutes = Number(option("minutes") ?? 5);
if (!Number.isInteger(seed) || !(minutes > 0)) {
  console.error("usage: npm run chaos -- [--seed <integer>] [--minutes <number>]");
  process.exit(2);
}
console.log(
  `chaos soak: seed ${seed}, ${minutes} min of faults (npm run chaos -- --seed ${seed} --minutes ${minutes} repeats it)`,
);
const report = await soak({ seed, durationMs: minutes * 60_000, log: (line) => console.log(`  ${line}`) });
console.log(`\n${report.flows} flows, ${report.faults.length} faults; invariants:`);
for (const i of report.invariants) console.log(`  ${i.held ? "ok  " : "FAIL"}  ${i.name}: ${i.detail}`);
console.log(report.ok ? "\nall invariants held" : `\ninvariants failed: repeat with --seed ${seed}`);
process.exitCode = report.ok ? 0 : 1;
