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
  "shared/key-members.ts",
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
  "shared/keys.ts": ["shared/model", "shared/key-members.ts"],
  "shared/key-members.ts": [],
  "shared/auth": ["shared/model"],
  "shared/flow": ["shared/model"],
  "shared/store": ["shared/model", "shared/keys.ts", "shared/key-members.ts", "shared/auth", "shared/flow"],
  "shared/client": ["shared/model", "shared/auth", "shared/flow"],
  "functions/core": SHARED,
  // Retention's removals and a context's deletion: the Dispatcher's sweep and the API run them.
  "functions/upkeep": FUNCTIONS_BELOW_API,
  // A flow's object starts and cancels its child flows through the service functions (children.ts).
  "functions/flow": ["functions/service", ...FUNCTIONS_BELOW_API],
  "functions/dispatch": ["functions/upkeep", ...FUNCTIONS_BELOW_API],
  "functions/supervisor": FUNCTIONS_BELOW_API,
  "functions/feed": FUNCTIONS_BELOW_API,
  "functions/service": ["functions/upkeep", ...FUNCTIONS_BELOW_API],
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
    "functions/upkeep",
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

/** Files that name keys of a Durable Object's own storage (not Redis), which look like Redis keys. */
const DO_STORAGE_KEYS = ["functions/flow/nonces.ts"];

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

  it("builds every Redis key through Keys, never by hand, in the source and the tests", () => {
    const literal = /ctx:\{|sweep:due|["'`](?:index|queue|nonce|idem):|:slots["'`]|["'`]msg_(?:out|in)\b/;
    // keys.ts builds them; keys.test.ts checks that layout; this file holds the pattern.
    const exempt = /(shared\/keys\.ts|test\/unit\/(keys|layout)\.test\.ts)$/;
    const handmade = [...files, ...sourceFiles(path.join(root, "test"))]
      .filter((f) => !exempt.test(rel(f)) && !DO_STORAGE_KEYS.includes(rel(f)))
      .flatMap((file) =>
        readFileSync(file, "utf8")
          .split("\n")
          .flatMap((line, i) =>
            literal.test(line) && !/^\s*(\/\/|\*|\/\*)/.test(line) ? [`${rel(file)}:${i + 1}: ${line.trim()}`] : [],
          ),
      );
    expect(handmade).toEqual([]);
  });

  it("keeps every Lua script in shared/store/scripts/, and no script builds a key it was not given", () => {
    const scripts = files.filter((f) => readFileSync(f, "utf8").includes("new LuaScript("));
    expect(scripts.length).toBeGreaterThan(10);
    expect(scripts.map(rel).filter((f) => !f.startsWith("shared/store/scripts/"))).toEqual([]);
    // A key fragment joined on inside Lua (`ARGV[1] .. "runner:" .. id`, `local key = ARGV[2] ..
    // id`) or a command on a key taken from ARGV is a key the call's KEYS do not name: Redis
    // Cluster could not route it, and Keys did not build it.
    const joined = /\.\.\s*"[a-z_]+:|=\s*ARGV\[\d+\]\s*\.\.|redis\.call\("(?!SCAN")\w+", ARGV\[/;
    const offenders = scripts.flatMap((file) =>
      readFileSync(file, "utf8")
        .split("\n")
        .flatMap((line, i) => (joined.test(line) ? [`${rel(file)}:${i + 1}: ${line.trim()}`] : [])),
    );
    expect(offenders).toEqual([]);
  });

  it(`keeps source files under ${MAX_LINES} lines`, () => {
    const long = files
      .map((file) => ({ file: rel(file), lines: readFileSync(file, "utf8").split("\n").length }))
      .filter((f) => f.lines > MAX_LINES);
    expect(long).toEqual([]);
  });
});
