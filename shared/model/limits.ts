/**
 * Every size limit of the coordinator, in bytes of UTF-8 (JSON as this project writes it: no
 * spaces). They are chosen together, so that no storage call (a request to the Upstash-protocol
 * endpoint, or its answer) can pass the storage's own limit of 10 MB: docs/limits.md states the
 * worst case of each call and `test/e2e/limits.test.ts` runs it. One place, read by the API's
 * checks, the flow machine, the store and the reference runner.
 */
export const SIZE_LIMITS = {
  /** A request's body, on every route (a flow file, a report, a JSON-RPC call). */
  requestBody: 1024 * 1024,
  /**
   * A flow's `env_vars`, and a job's own, each as JSON. The flow's are stored once and copied
   * into each delivery (never into storage per job).
   */
  env: 64 * 1024,
  /**
   * A job's result map, as JSON: a bigger one ends the attempt in error. Results reach the jobs
   * that depend on them as environment variables, and Linux allows 128 KiB for one.
   */
  result: 64 * 1024,
  /**
   * A job's inputs: its dependencies' results together, as the JSON of its `FLOW_INPUTS`
   * variable (which must fit one environment variable): a job whose inputs are bigger ends in
   * error without running.
   */
  inputs: 120 * 1024,
  /**
   * A flow's results together (every finished job's): a result that would take them past this
   * ends its attempt in error. A flow's view and the read that rebuilds it carry all of them.
   */
  flowResults: 2 * 1024 * 1024,
  /**
   * A push runner's answer to a delivery POST, the reports it carries included: a bigger 2xx
   * answer counts as taken with its reports unread (a delivery of unknown outcome).
   */
  answer: 4 * 1024 * 1024,
  /** One log line, in characters (the reference runner cuts longer lines into pieces). */
  logLine: 16 * 1024,
  /** The log lines one report (or answer) may carry. */
  logLinesPerReport: 1000,
  /** What a job's attempt keeps of its logs: later lines are dropped once it holds this much. */
  logsPerAttempt: 256 * 1024,
  /** A job's error text, in characters. */
  error: 4096,
} as const;

const encoder = new TextEncoder();

/** The size of `text` in UTF-8 bytes. */
export function utf8Bytes(text: string): number {
  // encodeInto a throwaway buffer would be cheaper for short texts, but these are rare paths.
  return encoder.encode(text).length;
}

/** The size of a value as this project writes it: JSON, UTF-8. */
export function jsonBytes(value: unknown): number {
  return utf8Bytes(JSON.stringify(value) ?? "");
}

/** "64 KiB", "1 MiB", "512 B": a limit as the docs and problems say it. */
export function formatBytes(bytes: number): string {
  if (bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes >= 1024 * 1024) return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
  if (bytes >= 1024 && bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  if (bytes >= 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${bytes} B`;
}
