import { describe, expect, it } from "vitest";
import { summarizeProfile, type CpuProfile } from "../../bench/profile.js";

/** A profile whose samples are `[function, µs since the one before]`, each function under the root. */
function profileOf(samples: [string, number][]): CpuProfile {
  const names = [...new Set(samples.map(([n]) => n))];
  return {
    nodes: [
      { id: 1, callFrame: { functionName: "(root)" }, children: names.map((_, i) => i + 2) },
      ...names.map((n, i) => ({ id: i + 2, callFrame: { functionName: n } })),
    ],
    samples: samples.map(([n]) => names.indexOf(n) + 2),
    timeDeltas: samples.map(([, us]) => us),
    startTime: 0,
    endTime: samples.reduce((t, [, us]) => t + us, 0),
  };
}

describe("the benchmark's profile summary", () => {
  it("weighs each sample by the time it stands for, not one sample one vote", () => {
    // 20 samples 70 µs apart in `dense` (1.4 ms); 2 samples 1 ms apart in `sparse` (2 ms).
    const profile = profileOf([
      ...Array.from({ length: 20 }, () => ["dense", 70] as [string, number]),
      ["sparse", 1000],
      ["sparse", 1000],
    ]);
    const lines = summarizeProfile(profile).split("\n");
    expect(lines[0]).toBe("0.00 s profiled, 0.00 s of it busy in the isolate; shares of the busy time:");
    expect(lines[2]).toMatch(/^\s+58\.8%\s+2 ms\s+sparse$/);
    expect(lines[3]).toMatch(/^\s+41\.2%\s+1 ms\s+dense$/);
  });

  it("counts a long silence before a sample as at most 2 ms, and idle samples not at all", () => {
    const profile = profileOf([
      ["(idle)", 500_000],
      ["work", 300_000],
      ["work", 200],
    ]);
    expect(summarizeProfile(profile)).toContain("0.80 s profiled, 0.00 s of it busy");
    expect(summarizeProfile(profile).split("\n")[2]).toMatch(/^\s+100\.0%\s+2 ms\s+work$/);
  });
});
