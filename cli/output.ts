import type { Page } from "../shared/client/index.js";

/** Where the CLI writes; process.stdout / process.stderr, or buffers in a test. */
export interface Writer {
  write(text: string): unknown;
}

/**
 * Prints results: text for people by default, the raw JSON object with `--json` for scripts.
 * Results go to stdout, notes (what was saved where) to stderr, so `--json` output stays parseable.
 */
export class Output {
  /** The status line on screen now (TTY only), redrawn below every new line. */
  private statusText = "";

  constructor(
    readonly json: boolean,
    private readonly stdout: Writer = process.stdout,
    private readonly stderr: Writer = process.stderr,
    /** stdout is a terminal: a status line may be redrawn in place. Pipes get plain lines only. */
    readonly tty = false,
  ) {}

  /** Prints a command's result: `value` as JSON, or the text lines. */
  result(value: unknown, lines: string[]): void {
    this.clearStatus();
    this.stdout.write(this.json ? `${JSON.stringify(value, null, 2)}\n` : lines.map((l) => `${l}\n`).join(""));
  }

  /** A line printed as it happens (a watched job changing status); left out with `--json`. */
  line(text: string): void {
    if (this.json) return;
    const status = this.statusText;
    this.clearStatus();
    this.stdout.write(`${text}\n`);
    this.status(status);
  }

  /** One record of a stream as it arrives: a line of text, or with `--json` the value as one line of JSON. */
  record(value: unknown, text: string): void {
    if (!this.json) return this.line(text);
    this.stdout.write(`${JSON.stringify(value)}\n`);
  }

  /**
   * Shows `text` as the status line (a progress bar), replacing the previous one. Only on a
   * terminal and without `--json`: escape codes in a pipe or a log file would be noise.
   */
  status(text: string): void {
    if (!this.tty || this.json) return;
    if (text === "") return this.clearStatus();
    this.stdout.write(`\r\x1b[2K${text}`);
    this.statusText = text;
  }

  /** Removes the status line, so what comes next starts on a clean line. */
  clearStatus(): void {
    if (this.statusText === "") return;
    this.stdout.write("\r\x1b[2K");
    this.statusText = "";
  }

  /** A side remark on stderr, e.g. that the profile was updated. */
  note(line: string): void {
    this.clearStatus();
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
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join("  ")
      .trimEnd();
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

/** `n word` with the word in plural unless n is 1; `many` for words not made plural by an s. */
export function plural(n: number, word: string, many = `${word}s`): string {
  return `${n} ${n === 1 ? word : many}`;
}

/**
 * A page of a list as text: its rows and a footer counting them against the total (with the
 * next page's offset), or, for an empty page, whether the list is empty or the offset is past
 * its end. `noun` is one item, e.g. `runner`; `where` is the list's owner, e.g. `context 1`.
 */
export function pageLines(page: Page<unknown>, rows: string[], noun: string, where: string): string[] {
  if (page.items.length === 0)
    return [page.total > 0 ? `no ${noun}s at this offset (${where} has ${page.total})` : `no ${noun}s in ${where}`];
  const more = page.next !== undefined ? `; next page: --offset ${page.next}` : "";
  return [...rows, `${page.items.length} of ${plural(page.total, noun)} in ${where}${more}`];
}
