import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

// DESIGN.md's layout rules, checked on the source itself: who may import whom, no runtime
// import cycles, and files small enough to read.

const root = path.resolve(import.meta.dirname, "../..");
const AREAS = ["functions", "shared", "runner", "cli", "infra"] as const;
type Area = (typeof AREAS)[number];

const MAY_IMPORT: Record<Area, Area[]> = {
  functions: ["functions", "shared"],
  shared: ["shared"],
  runner: ["runner", "shared"],
  cli: ["cli", "shared"],
  infra: ["infra", "shared"],
};

const MAX_LINES = 400;

/** The .ts files under `dir`, recursively; a missing folder throws (ENOENT) rather than counting as empty. */
function sourceFiles(dir: string): string[] {
  let files: string[] = [];
  for (const entry of readdirSync(dir)) {
    const full = path.join(dir, entry);
    const stat = statSync(full, { throwIfNoEntry: false }); // undefined: gone since the listing
    if (stat?.isDirectory()) files = files.concat(sourceFiles(full));
    else if (stat && full.endsWith(".ts") && !full.endsWith(".d.ts")) files.push(full);
  }
  return files;
}

/** Relative imports that exist at run time (`import type` and `export type` are left out). */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, "utf8");
  const found: string[] = [];
  const pattern = /^\s*(?:import|export)\s+(?!type\b)(?:[^'";]*?\sfrom\s+)?["'](\.[^"']+)["']/gm;
  for (const match of text.matchAll(pattern)) {
    const target = path.resolve(path.dirname(file), (match[1] as string).replace(/\.js$/, ".ts"));
    found.push(target);
  }
  return found;
}

const files = AREAS.flatMap((area) => sourceFiles(path.join(root, area)));
const areaOf = (file: string) => path.relative(root, file).split(path.sep)[0] as Area;

describe("source layout", () => {
  it("finds every area's source files (a folder moved away would make the checks below vacuous)", () => {
    const empty = AREAS.filter((area) => !files.some((file) => areaOf(file) === area));
    expect(empty).toEqual([]);
  });

  it("keeps imports inside what DESIGN.md allows (shared imports nothing outside shared)", () => {
    const violations = files.flatMap((file) =>
      runtimeImports(file)
        .filter((target) => !MAY_IMPORT[areaOf(file)].includes(areaOf(target)))
        .map((target) => `${path.relative(root, file)} → ${path.relative(root, target)}`),
    );
    expect(violations).toEqual([]);
  });

  it("has no runtime import cycles", () => {
    const graph = new Map(files.map((f) => [f, runtimeImports(f)]));
    expect([...graph.values()].flat().length).toBeGreaterThan(10); // the parser does find imports
    const state = new Map<string, "visiting" | "done">();
    const cycles: string[] = [];
    const visit = (file: string, trail: string[]) => {
      if (state.get(file) === "done") return;
      if (state.get(file) === "visiting") {
        cycles.push([...trail.slice(trail.indexOf(file)), file].map((f) => path.relative(root, f)).join(" → "));
        return;
      }
      state.set(file, "visiting");
      for (const next of graph.get(file) ?? []) visit(next, [...trail, file]);
      state.set(file, "done");
    };
    for (const file of files) visit(file, []);
    expect(cycles).toEqual([]);
  });

  it(`keeps source files under ${MAX_LINES} lines`, () => {
    const long = files
      .map((file) => ({ file: path.relative(root, file), lines: readFileSync(file, "utf8").split("\n").length }))
      .filter((f) => f.lines > MAX_LINES);
    expect(long).toEqual([]);
  });
});
