/** Where the CLI writes; process.stdout / process.stderr, or buffers in a test. */
export interface Writer {
  write(text: string): unknown;
}

/**
 * Prints results: text for people by default, the raw JSON object with `--json` for scripts.
 * Results go to stdout, notes (what was saved where) to stderr, so `--json` output stays parseable.
 */
export class Output {
  constructor(
    readonly json: boolean,
    private readonly stdout: Writer = process.stdout,
    private readonly stderr: Writer = process.stderr,
  ) {}

  /** Prints a command's result: `value` as JSON, or the text lines. */
  result(value: unknown, lines: string[]): void {
    this.stdout.write(this.json ? `${JSON.stringify(value, null, 2)}\n` : lines.map((l) => `${l}\n`).join(""));
  }

  /** A side remark on stderr, e.g. that the profile was updated. */
  note(line: string): void {
    this.stderr.write(`flowc: ${line}\n`);
  }
}

/** `label  value` lines with the values aligned. */
export function fields(rows: [string, string][]): string[] {
  const width = Math.max(...rows.map(([label]) => label.length));
  return rows.map(([label, value]) => `${label.padEnd(width)}  ${value}`.trimEnd());
}

/** A small table: a header row, then one row per item, columns padded to their widest cell. */
export function table(headers: string[], rows: string[][]): string[] {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join("  ").trimEnd();
  return [line(headers), ...rows.map(line)];
}

/** A public key shortened for text output; `--json` and `show` commands give it whole. */
export function shortKey(pubkey: string): string {
  return `${pubkey.slice(0, 8)}…`;
}

/** Epoch seconds as an ISO time (UTC, no milliseconds). */
export function timestamp(seconds: number): string {
  return new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
}

/** Actor ids of a permission list, `-` when empty. */
export function ids(list: number[]): string {
  return list.length > 0 ? list.join(", ") : "-";
}
