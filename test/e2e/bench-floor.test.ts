import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FLOOR_PATHS, startFloorStack, type FloorStack } from "../../bench/floor.js";

// The floor's Worker (bench/floor-worker, `npm run bench -- --floor`) on a stack of its own,
// under `wrangler dev` and on plain workerd as `npm run serve` runs it (`--target serve`): each
// path answers and delivers what it should, so the floor the benchmark prints is of a path that
// works. Nothing is timed here.

const root = path.resolve(import.meta.dirname, "../..");

describe.each(["wrangler", "serve"] as const)("the floor's Worker (%s)", (target) => {
  let floor: FloorStack;
  beforeAll(async () => {
    floor = await startFloorStack(path.join(root, "bench", "floor-worker"), target);
  }, 90_000);
  afterAll(async () => floor?.stop());

  it("delivers once down each path, ten times down the chain", async () => {
    for (const [name] of FLOOR_PATHS) {
      const before = floor.deliveries();
      const [took] = await floor.time(name, 1);
      expect(took, name).toBeGreaterThan(0);
      expect(floor.deliveries() - before, name).toBe(1);
    }
    const before = floor.deliveries();
    await floor.time("chain", 1, true);
    expect(floor.deliveries() - before).toBe(10);
  });

  it("refuses a path it does not know", async () => {
    await expect(floor.time("no-such-path", 1)).rejects.toThrow(/path no-such-path answered 404/);
  });
});
