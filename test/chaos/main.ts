/**
 * `npm run chaos`: a seeded soak on the real local stack (see soak.ts), minutes long.
 *
 *   npm run chaos -- [--seed <n>] [--minutes <m>]
 *
 * Prints the faults as they are injected and the invariants at the end; exits 1 if any failed.
 * The same seed submits the same flows and injects the same faults in the same order.
 */
import { soak } from "./soak.js";

const USAGE = "usage: npm run chaos -- [--seed <integer>] [--minutes <number>]";
const args = process.argv.slice(2);
if (args.includes("--help") || args.includes("-h")) {
  console.log(USAGE);
  process.exit(0);
}
// Options in pairs, each known: anything else is a mistake, not a soak of the defaults.
const given = new Map<string, string>();
for (let i = 0; i < args.length; i += 2) {
  const [name, value] = [args[i] as string, args[i + 1]];
  if (!["--seed", "--minutes"].includes(name) || value === undefined) {
    console.error(`chaos: ${value === undefined ? `${name} needs a value` : `unknown option ${name}`}\n${USAGE}`);
    process.exit(2);
  }
  given.set(name, value);
}

const seed = Number(given.get("--seed") ?? Math.floor(Math.random() * 2 ** 31));
const minutes = Number(given.get("--minutes") ?? 5);
if (!Number.isInteger(seed) || !(minutes > 0)) {
  console.error(USAGE);
  process.exit(2);
}
console.log(
  `chaos soak: seed ${seed}, ${minutes} min of faults (npm run chaos -- --seed ${seed} --minutes ${minutes} repeats it)`,
);
const report = await soak({ seed, durationMs: minutes * 60_000, log: (line) => console.log(`  ${line}`) });
const r = report.reactive;
const g = report.growth;
const c = report.children;
console.log(
  `\n${report.flows} flows (${r.waits} waits, ${r.sleeps} sleeps, ${r.whens} whens, ${r.cleanups} clean-ups, ${r.sagas} sagas, ${r.cancels} cancelled with compensate; ${g.maps} maps of ${g.items} items, ${g.added} jobs added, ${g.refused} refused; ${c.jobs} child-flow jobs: ${c.flows} child flows, ${c.nested} nested, ${c.cancelledWithParent} cancelled with their parent, ${c.failed} failed, ${c.cancels} flows with children cancelled), ${report.faults.length} faults, ${r.events} events sent (${r.tries} tries); invariants:`,
);
for (const i of report.invariants) console.log(`  ${i.held ? "ok  " : "FAIL"}  ${i.name}: ${i.detail}`);
console.log(report.ok ? "\nall invariants held" : `\ninvariants failed: repeat with --seed ${seed}`);
process.exitCode = report.ok ? 0 : 1;
