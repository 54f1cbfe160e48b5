import { expect, it } from "vitest";
import { soak } from "../chaos/soak.js";

// The short chaos soak: about a minute of flows (waits, sleeps, branches, sagas and child flows among them) and events
// under random faults on the real local stack (`npm run chaos` runs it for minutes). The seed is
// printed; CHAOS_SEED=<seed> repeats a run.

it("keeps every invariant through a minute of random faults", async () => {
  const seed = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
  console.log(`chaos soak seed ${seed} (CHAOS_SEED=${seed} repeats it)`);
  const report = await soak({ seed, durationMs: 50_000, log: (line) => console.log(`chaos ${seed}: ${line}`) });
  const table = report.invariants.map((i) => `${i.held ? "ok  " : "FAIL"}  ${i.name}: ${i.detail}`).join("\n");
  const r = report.reactive;
  const c = report.children;
  const reacted = `${r.waits} waits, ${r.sleeps} sleeps, ${r.whens} whens, ${r.cleanups} clean-ups, ${r.sagas} sagas (${r.cancels} cancelled with compensate), ${r.events} events sent, ${c.flows} child flows (${c.nested} nested, ${c.cancelledWithParent} cancelled with their parent)`;
  console.log(
    `chaos soak seed ${seed}: ${report.flows} flows (${reacted}), faults: ${report.faults.join("; ")}\n${table}`,
  );
  expect(
    report.invariants.filter((i) => !i.held),
    `seed ${seed}\n${table}`,
  ).toEqual([]);
}, 480_000);
