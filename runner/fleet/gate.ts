/**
 * The idempotency gate's word on an attempt (a KV bucket keyed by attempt): `done` or `cancelled`
 * ends it wherever it comes again; `running:<starts>:<alone>` counts its starts without a result,
 * and how many of them it ran alone on its worker.
 *
 * Why "alone": a job that kills its worker (a runaway script, memory exhausted) takes down the
 * jobs beside it, and all of them come again with a start counted. Counting those starts against
 * every one of them would send an innocent job to the dead letters with the poison one. So a job
 * that started before and never finished (a suspect) runs alone on its worker, and only starts
 * alone count towards `--max-deliver`: a worker that dies while running a suspect alone died of it.
 */
export type GateState =
  { kind: "done" | "cancelled" } | { kind: "running"; starts: number; alone: number } | { kind: "new" };

/** Reads a gate value ("" when the attempt has none). */
export function readGate(value: string): GateState {
  if (value === "done" || value === "cancelled") return { kind: value };
  const match = /^running:(\d+)(?::(\d+))?$/.exec(value);
  if (!match) return { kind: "new" };
  return { kind: "running", starts: Number(match[1]), alone: Number(match[2] ?? 0) };
}

/** The gate's value for one more start, alone on its worker (a suspect's, held to itself) or not. */
export function startedAgain(state: GateState, alone: boolean): string {
  const starts = state.kind === "running" ? state.starts : 0;
  const before = state.kind === "running" ? state.alone : 0;
  return `running:${starts + 1}:${before + (alone ? 1 : 0)}`;
}

/** A start without a result is on record: the attempt may be what killed a worker. */
export function isSuspect(state: GateState): boolean {
  return state.kind === "running" && state.starts > 0;
}
