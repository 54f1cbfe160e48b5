// Job lists for flows served by test runners (test/support/test-runner.ts), which report for
// each job a result made of its name and attempt: the scripts themselves are never run.

/** `n` sh jobs named `<prefix>0`, `<prefix>1`, …, none depending on another. */
export function shJobs(prefix: string, n: number) {
  return Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, script: "true", script_type: "sh" as const }));
}

/**
 * `layers` layers of `width` sh jobs named `<prefix>0`, `<prefix>1`, …; every job depends on
 * every job of the layer before.
 */
export function layeredJobs(prefix: string, layers: number, width: number) {
  return Array.from({ length: layers * width }, (_, i) => {
    const layer = Math.floor(i / width);
    return {
      name: `${prefix}${i}`,
      script: "true",
      script_type: "sh" as const,
      depends: layer === 0 ? [] : Array.from({ length: width }, (_, k) => `${prefix}${(layer - 1) * width + k}`),
    };
  });
}
