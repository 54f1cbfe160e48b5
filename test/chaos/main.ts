/**
 * `npm run chaos`: a seeded soak on the real local stack (see soak.ts), minutes long.
 *
 *   npm run chaos -- [--seed <n>] [--minutes <m>] [--cluster] [--failover kill|freeze|none]
 *
 * `--cluster` runs it over a Redis Cluster of its own (six redis-servers: three masters, a replica
 * each; test/support/redis-cluster.ts), whose master serving the soak's context fails over
 * half-way through: killed (`--failover kill`, the default), frozen past the node timeout
 * (`freeze`: the writes it acknowledges on waking are lost), or not at all (`none`).
 *
 * Prints the faults as they are injected and the invariants at the end; exits 1 if any failed.
 * The same seed submits the same flows and injects the same faults in the same order.
 */
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import type { Failover } from "./faults.js";
import { soak } from "./soak.js";

const USAGE =
  "usage: npm run chaos -- [--seed <integer>] [--minutes <number>] [--cluster] [--failover kill|freeze|none]";
const args = process.argv.slice(2);
if (args.includes("--help") || args.includes("-h")) {
  console.log(USAGE);
  process.exit(0);
}
// Options in pairs (`--cluster` alone), each known: anything else is a mistake, not a soak of the defaults.
const given = new Map<string, string>();
for (let i = 0; i < args.length; i += 2) {
  if (args[i] === "--cluster") {
    given.set("--cluster", "yes");
    i--;
    continue;
  }
  const [name, value] = [args[i] as string, args[i + 1]];
  if (!["--seed", "--minutes", "--failover"].includes(name) || value === undefined) {
    console.error(`chaos: ${value === undefined ? `${name} needs a value` : `unknown option ${name}`}\n${USAGE}`);
    process.exit(2);
  }
  given.set(name, value);
}

const seed = Number(given.get("--seed") ?? Math.floor(Math.random() * 2 ** 31));
const minutes = Number(given.get("--minutes") ?? 5);
const failover = given.get("--failover") ?? "kill";
const onCluster = given.has("--cluster");
if (!Number.isInteger(seed) || !(minutes > 0) || !["kill", "freeze", "none"].includes(failover)) {
  console.error(USAGE);
  process.exit(2);
}
const options = onCluster ? ` --cluster --failover ${failover}` : "";
console.log(
  `chaos soak: seed ${seed}, ${minutes} min of faults${onCluster ? " over a Redis Cluster" : ""} (npm run chaos -- --seed ${seed} --minutes ${minutes}${options} repeats it)`,
);
let cluster: RedisCluster | undefined;
if (onCluster) {
  cluster = await startRedisCluster();
  console.log(`Redis Cluster of 6 nodes: ${cluster.seeds}`);
}
const report = await soak({
  seed,
  durationMs: minutes * 60_000,
  log: (line) => console.log(`  ${line}`),
  ...(cluster ? { cluster } : {}),
  ...(cluster && failover !== "none" ? { failover: failover as Failover } : {}),
}).finally(() => cluster?.stop());
const r = report.reactive;
const g = report.growth;
const c = report.children;
console.log(
  `\n${report.flows} flows (${r.waits} waits, ${r.sleeps} sleeps, ${r.whens} whens, ${r.cleanups} clean-ups, ${r.sagas} sagas, ${r.cancels} cancelled with compensate; ${g.maps} maps of ${g.items} items, ${g.added} jobs added, ${g.refused} refused; ${c.jobs} child-flow jobs: ${c.flows} child flows, ${c.nested} nested, ${c.cancelledWithParent} cancelled with their parent, ${c.failed} failed, ${c.cancels} flows with children cancelled), ${report.faults.length} faults, ${r.events} events sent (${r.tries} tries); invariants:`,
);
for (const i of report.invariants) console.log(`  ${i.held ? "ok  " : "FAIL"}  ${i.name}: ${i.detail}`);
console.log(report.ok ? "\nall invariants held" : `\ninvariants failed: repeat with --seed ${seed}`);
process.exitCode = report.ok ? 0 : 1;
