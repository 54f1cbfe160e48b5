import path from "node:path";
import { describe, expect, it } from "vitest";
import { compareWith, renderComparison } from "../../bench/compare.js";
import type { Side } from "../../bench/compare-side.js";

// `npm run bench -- --compare REF` (docs/benchmark.md): the table it prints from both sides'
// rounds, and the refusals it makes before starting anything.

const side = (startP50: number, bulkWorkerCpu: number): Side => ({
  startP50,
  startP95: startP50 + 10,
  appliedP50: startP50 * 2,
  loneCpu: 50,
  bulkWorkerCpu,
  chainP50: 100,
});

describe("the paired comparison", () => {
  it("prints each side's median over the rounds, its range, and the difference of the medians", () => {
    const table = renderComparison(
      "main",
      "0123456789abcdef",
      [side(22, 3.4), side(24, 3.5), side(23, 3.6)],
      [side(25, 3.7), side(24, 3.8), side(26, 3.9)],
    );
    expect(table).toContain("This tree against main (0123456789), 3 paired rounds");
    expect(table).toContain(
      "| submit → job starts at the runner, p50 (ms) | 23.0 (22.0–24.0) | 25.0 (24.0–26.0) | -2.0 |",
    );
    expect(table).toContain("| 3.50 (3.40–3.60) | 3.80 (3.70–3.90) | -0.30 |");
    expect(table).toContain("| CPU / lone job, all processes (ms) | 50.0 (50.0–50.0) | 50.0 (50.0–50.0) | 0.0 |");
  });

  it("refuses a name that is no commit, before starting anything", async () => {
    const root = path.resolve(import.meta.dirname, "../..");
    await expect(
      compareWith(root, "no-such-ref-anywhere", { rounds: 1, samples: 5, bulk: 10, log: () => undefined }),
    ).rejects.toThrow(/"no-such-ref-anywhere" names no commit of this repository/);
  });
});
