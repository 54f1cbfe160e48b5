import { readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

// The layers of docs/architecture.md, checked on the source itself: every folder has a rule
// naming what it may import, no import (type-only ones included) points where its rule does not
// allow, there is no import cycle at all, only the storage layer talks to Redis, and files stay
// small enough to read.

const root = path.resolve(import.meta.dirname, "../..");
const AREAS = ["functions", "shared", "runner", "cli", "infra", "console"] as const;

const SHARED = [
  "shared/model",
  "shared/keys.ts",
  "shared/auth",
  "shared/flow",
  "shared/store",
  "shared/client",
  "shared/http",
];
const FUNCTIONS_BELOW_API = ["functions/core", ...SHARED];

/**
 * Every unit (a folder, or a file on its own) and the units it may import besides itself. A file
 * belongs to the unit with the longest matching path. Read from the bottom up: shared/model
 * imports nothing; the Worker's entry (functions/index.ts) sits on top of everything it exports.
 */
const MAY_IMPORT: Record<string, string[]> = {
  "shared/model": [],
  "shared/http": [],
  "shared/keys.ts": ["shared/model"],
  "shared/auth": ["shared/model"],
  "shared/flow": ["shared/model"],
  "shared/store": ["shared/model", "shared/keys.ts", "shared/auth", "shared/flow"],
  "shared/client": ["shared/model", "shared/auth", "shared/flow"],
  "functions/core": SHARED,
  "functions/flow": FUNCTIONS_BELOW_API,
  "functions/dispatch": FUNCTIONS_BELOW_API,
  "functions/supervisor": FUNCTIONS_BELOW_API,
  "functions/feed": FUNCTIONS_BELOW_API,
  "functions/service": FUNCTIONS_BELOW_API,
  "functions/api": ["functions/service", ...FUNCTIONS_BELOW_API],
  // The Scheduler objects start and cancel flows through the same service functions as the API.
  "functions/schedule": ["functions/service", ...FUNCTIONS_BELOW_API],
  "functions/index.ts": [
    "functions/api",
    "functions/supervisor",
    "functions/flow",
    "functions/dispatch",
    "functions/feed",
    "functions/schedule",
    ...FUNCTIONS_BELOW_API,
  ],
  runner: SHARED,
  cli: SHARED,
  infra: SHARED,
  // The web console runs in the browser: the models' types, the signing code and the client's
  // browser-safe parts (problems, event streams), never the storage layer or the flow machine.
  console: ["shared/model", "shared/auth", "shared/client"],
};

/** Only these may import the Redis client (the storage layer itself): everything else goes through Store. */
const REDIS_CLIENT = {
  module: /^@upstash\/redis/,
  file: path.join(root, "shared/store/redis.ts"),
  allowed: "shared/store",
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

/** Every import and re-export of a file, `import type` included: relative ones resolved to files, packages as named. */
function importsOf(file: string): { relative: string[]; packages: string[] } {
  const text = readFileSync(file, "utf8");
  const relative: string[] = [];
  const packages: string[] = [];
  const pattern = /^\s*(?:import|export)\s+(?:type\s+)?(?:[^'";]*?\sfrom\s+)?["']([^"']+)["']/gm;
  for (const match of text.matchAll(pattern)) {
    const spec = match[1] as string;
    if (spec.startsWith(".")) relative.push(path.resolve(path.dirname(file), spec.replace(/\.js$/, ".ts")));
    else packages.push(spec);
  }
  return { relative, packages };
}

const rel = (file: string) => path.relative(root, file).split(path.sep).join("/");
const files = AREAS.flatMap((area) => sourceFiles(path.join(root, area)));
const graph = new Map(files.map((f) => [f, importsOf(f)]));

/** The unit a file belongs to: the longest rule path that is the file or a folder holding it. */
function unitOf(file: string): string | undefined {
  const r = rel(file);
  return Object.keys(MAY_IMPORT)
    .filter((unit) => r === unit || r.startsWith(`${unit}/`))
    .sort((a, b) => b.length - a.length)[0];
}

describe("source layout", () => {
  it("finds every area's source files (a folder moved away would make the checks below vacuous)", () => {
    const empty = AREAS.filter((area) => !files.some((file) => rel(file).startsWith(`${area}/`)));
    expect(empty).toEqual([]);
    expect([...graph.values()].flatMap((i) => i.relative).length).toBeGreaterThan(100); // the parser does find imports
  });

  it("gives every file a layer: a new folder needs a rule", () => {
    expect(files.filter((f) => !unitOf(f)).map(rel)).toEqual([]);
  });

  it("keeps every import, type-only ones included, inside what its layer allows", () => {
    const violations = files.flatMap((file) => {
      const from = unitOf(file) as string;
      return (graph.get(file)?.relative ?? [])
        .filter((target) => {
          const to = unitOf(target);
          return to !== from && !(to && MAY_IMPORT[from]?.includes(to));
        })
        .map((target) => `${rel(file)} (${from}) → ${rel(target)} (${unitOf(target) ?? "outside every layer"})`);
    });
    expect(violations).toEqual([]);
  });

  it("has no import cycle, not even through type-only imports", () => {
    const state = new Map<string, "visiting" | "done">();
    const cycles: string[] = [];
    const visit = (file: string, trail: string[]) => {
      if (state.get(file) === "done") return;
      if (state.get(file) === "visiting") {
        cycles.push([...trail.slice(trail.indexOf(file)), file].map(rel).join(" → "));
        return;
      }
      state.set(file, "visiting");
      for (const next of graph.get(file)?.relative ?? []) visit(next, [...trail, file]);
      state.set(file, "done");
    };
    for (const file of files) visit(file, []);
    expect(cycles).toEqual([]);
  });

  it("lets only the storage layer import the Redis client", () => {
    const outside = files.filter((file) => !rel(file).startsWith(`${REDIS_CLIENT.allowed}/`));
    const offenders = outside.filter((file) => {
      const { relative, packages } = graph.get(file) ?? { relative: [], packages: [] };
      return packages.some((p) => REDIS_CLIENT.module.test(p)) || relative.includes(REDIS_CLIENT.file);
    });
    expect(offenders.map(rel)).toEqual([]);
  });

  it("has tests build Redis keys through Keys, never by hand", () => {
    // keys.test.ts checks the layout itself; this file holds the pattern.
    const tests = sourceFiles(path.join(root, "test")).filter((f) => !/(keys|layout)\.test\.ts$/.test(f));
    const literal = /ctx:\{|sweep:due|["'`](?:index|queue|nonce|idem):|:slots["'`]|["'`]msg_(?:out|in)\b/;
    const handmade = tests.flatMap((file) =>
      readFileSync(file, "utf8")
        .split("\n")
        .flatMap((line, i) =>
          literal.test(line) && !line.trim().startsWith("//") ? [`${rel(file)}:${i + 1}: ${line.trim()}`] : [],
        ),
    );
    expect(handmade).toEqual([]);
  });

  it(`keeps source files under ${MAX_LINES} lines`, () => {
    const long = files
      .map((file) => ({ file: rel(file), lines: readFileSync(file, "utf8").split("\n").length }))
      .filter((f) => f.lines > MAX_LINES);
    expect(long).toEqual([]);
  });
});
