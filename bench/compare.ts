import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, symlinkSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Side } from "./compare-side.js";
import { median } from "./figures.js";

/** How `--compare` runs. */
export interface CompareOptions {
  /** Rounds; each runs both trees once, the order flipping from one round to the next. */
  rounds: number;
  /** Lone jobs each side times per round. */
  samples: number;
  /** Independent jobs of the flow each side runs per round (for the Worker's CPU per job). */
  bulk: number;
  log(message: string): void;
}

const FIGURES: { id: keyof Side; label: string; decimals: number }[] = [
  { id: "startP50", label: "submit → job starts at the runner, p50 (ms)", decimals: 1 },
  { id: "startP95", label: "submit → job starts at the runner, p95 (ms)", decimals: 1 },
  { id: "appliedP50", label: "submit → result applied, p50 (ms)", decimals: 1 },
  { id: "loneCpu", label: "CPU / lone job, all processes (ms)", decimals: 1 },
  { id: "bulkWorkerCpu", label: "CPU / job in the Worker's workerd, independent jobs (ms)", decimals: 2 },
  { id: "chainP50", label: "10-job chain, results in the answers, p50 (ms)", decimals: 1 },
];

/**
 * This source tree (uncommitted changes included) against the commit `ref`, paired: a change of
 * a millisecond or two is inside the noise of one run on a shared 2-core machine, so both trees
 * run in turn, each on a private stack of its own that is idle while the other runs, the order
 * flipping every round, and each figure is the median of the rounds (docs/benchmark.md,
 * "`--compare`"). `ref` is checked out in a temporary git worktree, which shares this tree's
 * node_modules: its package-lock.json must be this one's.
 */
export async function compareWith(root: string, ref: string, options: CompareOptions): Promise<string> {
  const git = (...args: string[]) => execFileSync("git", args, { cwd: root, encoding: "utf8" }).trim();
  let sha: string;
  try {
    sha = git("rev-parse", "--verify", "--quiet", `${ref}^{commit}`);
  } catch {
    throw new Error(`--compare: ${JSON.stringify(ref)} names no commit of this repository`);
  }
  try {
    git("diff", "--quiet", sha, "--", "package-lock.json");
  } catch {
    throw new Error(
      `--compare: ${ref} depends on other packages than this tree (package-lock.json differs); both sides share one node_modules`,
    );
  }
  const worktree = mkdtempSync(path.join(os.tmpdir(), "bench-compare-"));
  git("worktree", "add", "--detach", "--force", worktree, sha);
  symlinkSync(path.join(root, "node_modules"), path.join(worktree, "node_modules"), "dir");
  const trees = { here: root, ref: worktree };
  const results: Record<keyof typeof trees, Side[]> = { here: [], ref: [] };
  try {
    for (let round = 0; round < options.rounds; round++) {
      const order = (round % 2 === 0 ? ["here", "ref"] : ["ref", "here"]) as (keyof typeof trees)[];
      for (const which of order) {
        options.log(`round ${round + 1}/${options.rounds}: ${which === "here" ? "this tree" : ref}`);
        results[which].push(await runSide(root, trees[which], options));
      }
    }
  } finally {
    git("worktree", "remove", "--force", worktree);
  }
  return renderComparison(ref, sha, results.here, results.ref);
}

/** Runs one side (compare-side.ts, from this tree) against `tree`'s code. */
function runSide(root: string, tree: string, options: CompareOptions): Promise<Side> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ["--import", "tsx", path.join(root, "bench", "compare-side.ts")], {
      cwd: tree,
      env: {
        ...process.env,
        BENCH_TREE: tree,
        BENCH_SAMPLES: String(options.samples),
        BENCH_BULK: String(options.bulk),
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    let err = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (err = (err + chunk.toString()).slice(-4000)));
    child.once("error", reject);
    child.once("exit", (code) => {
      const line = out.split("\n").find((l) => l.startsWith("COMPARE "));
      if (code === 0 && line) resolve(JSON.parse(line.slice("COMPARE ".length)) as Side);
      else reject(new Error(`--compare: the side of ${tree} failed (exit ${code}):\n${err || out.slice(-4000)}`));
    });
  });
}

/** The table: each figure's median over the rounds (min–max) on both sides, and their difference. */
export function renderComparison(ref: string, sha: string, here: readonly Side[], base: readonly Side[]): string {
  const cell = (values: number[], decimals: number) =>
    `${median(values).toFixed(decimals)} (${Math.min(...values).toFixed(decimals)}–${Math.max(...values).toFixed(decimals)})`;
  const rows = FIGURES.map(({ id, label, decimals }) => {
    const a = here.map((s) => s[id]);
    const b = base.map((s) => s[id]);
    const diff = median(a) - median(b);
    const sign = diff > 0 ? "+" : "";
    return `| ${label} | ${cell(a, decimals)} | ${cell(b, decimals)} | ${sign}${diff.toFixed(decimals)} |`;
  });
  return [
    `This tree against ${ref} (${sha.slice(0, 10)}), ${here.length} paired rounds, medians (min–max):`,
    "",
    `| figure | this tree | ${ref} | difference |`,
    "|---|---|---|---|",
    ...rows,
  ].join("\n");
}
