import { describe, expect, it } from "vitest";
import { FLOOR_PATHS, renderFloor, renderFloorTargets } from "../../bench/floor.js";

// `npm run bench -- --floor` (docs/benchmark.md, "The floor"): the table it prints. The floor's
// Worker itself runs in test/e2e/bench-floor.test.ts.

describe("the floor's table", () => {
  it("prints p50 and p95 per path over every round's samples, this project's rows beside them", () => {
    const ramp = (from: number) => Array.from({ length: 20 }, (_, i) => from + i);
    const times = {
      ...Object.fromEntries(FLOOR_PATHS.map(([name], i) => [name, ramp(5 + 2 * i)])),
      lone: ramp(25),
      chain: ramp(40),
      "ours-chain": ramp(100),
    };
    const table = renderFloor(times, { rounds: 2, samples: 10, targets: ["wrangler"] });
    expect(table).toContain("The floor of this stack (wrangler) against this project, 2 rounds of 10 (ms)");
    expect(table).toContain(
      "| floor: the front (wrangler dev's proxy; serve's front Worker), the Worker, its delivery to the runner | 14.0 | 23.0 |",
    );
    expect(table).toContain("a lone job's path | 22.0 | 31.0 |");
    expect(table).toContain("| **this project: a lone job** | 34.0 | 43.0 |");
    expect(table).toContain("each answered and stored | 49.0 | 58.0 |");
    expect(table).toContain("| **this project: a 10-job chain** | 109.0 | 118.0 |");
  });

  it("puts the targets side by side with --target both, p50 / p95 in each one's column", () => {
    const ramp = (from: number) => Array.from({ length: 20 }, (_, i) => from + i);
    const series = (base: number) => ({
      ...Object.fromEntries(FLOOR_PATHS.map(([name], i) => [name, ramp(base + 2 * i)])),
      lone: ramp(base + 20),
      chain: ramp(base + 35),
      "ours-chain": ramp(base + 95),
    });
    const table = renderFloorTargets(
      { wrangler: series(5), serve: series(1) },
      { rounds: 2, samples: 10, targets: ["wrangler", "serve"] },
    );
    expect(table).toContain("| submit → the runner has the job | wrangler: p50 / p95 | serve: p50 / p95 |");
    expect(table).toContain("| **this project: a lone job** | 34.0 / 43.0 | 30.0 / 39.0 |");
    expect(table).toContain("| **this project: a 10-job chain** | 109.0 / 118.0 | 105.0 / 114.0 |");
  });
});
