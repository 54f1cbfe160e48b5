import { BUDGETS } from "./budgets.js";
import { FIGURES, median, type Figures } from "./figures.js";

// The one table the benchmark prints: figure | this project | BullMQ | ratio, each cell the
// median over the runs with the min–max spread when there was more than one run.

/** A figure over the runs: its median, least and greatest value, and how many runs had it. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  n: number;
}

/** The spread of one figure of one system over `runs`, or undefined when no run had it. */
export function spreadOf(runs: readonly Figures[], id: string): Spread | undefined {
  const values = runs.map((r) => r[id]).filter((v): v is number => v !== undefined && Number.isFinite(v));
  if (values.length === 0) return undefined;
  return { median: median(values), min: Math.min(...values), max: Math.max(...values), n: values.length };
}

function format(value: number, decimals: number): string {
  return value.toLocaleString("en-US", { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
}

function cell(spread: Spread | undefined, decimals: number, unit: string): string {
  if (!spread) return "—";
  const main = `${format(spread.median, decimals)}${unit}`;
  if (spread.n < 2) return main;
  return `${main} (${format(spread.min, decimals)}–${format(spread.max, decimals)})`;
}

function ratio(ours: Spread | undefined, bull: Spread | undefined): string {
  if (!ours || !bull || bull.median === 0) return "";
  const r = ours.median / bull.median;
  return r >= 10 ? `${format(r, 0)}×` : r >= 1 ? `${format(r, 1)}×` : format(r, 2);
}

/** The budget line of a figure, if it has one: `≤ 6 ✓` or `≤ 6 ✗ over`. */
function budgetNote(id: string, ours: Spread | undefined): string {
  const budget = BUDGETS.find((b) => b.figure === id);
  if (!budget) return "";
  if (!ours) return `≤ ${budget.max}`;
  return `≤ ${budget.max} ${ours.median <= budget.max ? "ok" : "OVER"}`;
}

/** The table as Markdown, over the runs of both systems; only figures either system has. */
export function renderTable(ours: readonly Figures[], bull: readonly Figures[], withBudgets: boolean): string {
  // Without any BullMQ figure (quick mode), its columns are left out.
  const both = bull.length > 0;
  const header = ["figure", "this project", ...(both ? ["BullMQ", "ratio"] : []), ...(withBudgets ? ["budget"] : [])];
  const rows: string[][] = [];
  for (const f of FIGURES) {
    const o = spreadOf(ours, f.id);
    const b = spreadOf(bull, f.id);
    if (!o && !b) continue;
    const row = [f.label, cell(o, f.decimals, f.unit)];
    if (both) row.push(cell(b, f.decimals, f.unit), ratio(o, b));
    if (withBudgets) row.push(budgetNote(f.id, o));
    rows.push(row);
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  return [line(header), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...rows.map(line)].join("\n");
}

/** The budgets this project's figures exceed (median over the runs): empty when within all. */
export function overBudget(ours: readonly Figures[]): { figure: string; value: number; max: number }[] {
  const over: { figure: string; value: number; max: number }[] = [];
  for (const budget of BUDGETS) {
    const s = spreadOf(ours, budget.figure);
    if (!s || s.median > budget.max) over.push({ figure: budget.figure, value: s?.median ?? NaN, max: budget.max });
  }
  return over;
}
