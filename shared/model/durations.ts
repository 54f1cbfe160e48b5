/**
 * How long something took, as people read it, the same in the console and in `flowc`:
 * milliseconds under a second (`420 ms`), a tenth of a second under ten (`9.2 s`), then whole
 * units (`42 s`, `3 min 04 s`, `1 h 02 min`, `3 d 4 h`).
 *
 * Zod-free on purpose: the console's bundle imports it.
 */
export function formatMs(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1_000) return `${Math.floor(ms)} ms`;
  // Tenths are cut, not rounded: a running clock never shows a second it has not reached.
  if (ms < 10_000) return `${(Math.floor(ms / 100) / 10).toFixed(1).replace(/\.0$/, "")} s`;
  const s = Math.floor(ms / 1_000);
  if (s < 60) return `${s} s`;
  if (s < 3_600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, "0")} s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)} h ${String(Math.floor((s % 3_600) / 60)).padStart(2, "0")} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3_600)} h`;
}
