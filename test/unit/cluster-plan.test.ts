import { describe, expect, it } from "vitest";
import { Keys } from "../../shared/keys.js";
import { planCommit } from "../../shared/store/flow-plan.js";
import { jobIn, started, T } from "./flow-sim.js";

// A commit's script on a Redis Cluster names the keys of its context's slot only: the sweep's
// due set, a global key, leaves the script for a command of its own (flow-calls.ts), run once
// the script is written. On a single Redis it stays in the script (no command more).

/** A started flow's first commit (its start and first dispatches), planned with `keys`. */
function startPlan(keys: Keys) {
  const d = started([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a"] })]);
  return planCommit(keys, [{ state: d.state, effects: d.effects }], T + 1_000);
}

/** The hash tags of keys (`ctx:{3}:…` → `3`); a key without one hashes whole: itself. */
const tagsOf = (keys: string[]) => new Set(keys.map((k) => /\{([^}]+)\}/.exec(k)?.[1] ?? k));

describe("a commit's plan on a Redis Cluster", () => {
  it("keeps the script in the context's slot and carries the sweep's due time beside it", () => {
    const keys = new Keys("p:", { cluster: true });
    const plan = startPlan(keys);
    expect(tagsOf(plan.keys)).toEqual(new Set(["3"]));
    expect(plan.keys).not.toContain(keys.sweepDue());
    expect(plan.sweepDue).toEqual({ contextId: 3, at: expect.any(Number) });
    expect(plan.args.join(" ")).not.toContain(keys.sweepDue());
  });

  it("writes the due set in the script itself on a single Redis, and carries nothing beside it", () => {
    const keys = new Keys("p:");
    const plan = startPlan(keys);
    expect(plan.keys).toContain(keys.sweepDue());
    expect(tagsOf(plan.keys)).toEqual(new Set(["3", keys.sweepDue()]));
    expect(plan.sweepDue).toBeUndefined();
  });

  it("gives the due time of the nearest deadline, the one the single Redis's script writes", () => {
    const single = startPlan(new Keys(""));
    const clustered = startPlan(new Keys("", { cluster: true }));
    const z = single.args.indexOf("LT");
    expect(z).toBeGreaterThan(0);
    expect(clustered.sweepDue?.at).toBe(Number(single.args[z + 1]));
  });
});
