import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import vm from "node:vm";
import { buildWorker } from "./wrangler-build.js";

/**
 * What a cold start of the Worker evaluates, module by module (docs/cost-and-performance.md,
 * "Cold start"), in Node's V8 rather than workerd's (`npm run size -- --phases` gives workerd's
 * split into compiling, evaluating and the first request; this says what the evaluating is):
 *
 *   node --import tsx infra/startup-modules.ts [--runs 3] [--top 30]
 *
 * Builds the script as `wrangler deploy` does but not minified, so that esbuild leaves a
 * `// path` line before each module's top level; puts a probe before each of those lines and
 * before each top-level `var` of this repository's modules; evaluates the script in a
 * `vm.SourceTextModule` (`cloudflare:workers` replaced by a stand-in class), and answers one
 * `GET /info`. Each probe takes the process's CPU time and the number of zod schemas built so far
 * (zod's `$constructor` counted), so each module, and each statement of ours, is billed what ran
 * until the next probe. Medians over `--runs` fresh evaluations, each in a process of its own.
 * Figures are Node's and a bit inflated by the probes: compare them with each other, not with
 * workerd's.
 */

/** The non-minified bundle, as wrangler builds it; returns its text. */
async function bundle(outdir: string): Promise<string> {
  return readFileSync(await buildWorker(outdir, ["--minify=false"]), "utf8");
}

/** The bundle with a probe before each module and each top-level `var` of ours, and zod's constructor counted. */
function instrument(script: string): string {
  const lines = script.split("\n");
  let module = "?";
  let start = 0;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const header = /^\/\/ (\S+\.(?:ts|js|mjs|cjs|json))$/.exec(line);
    if (header) {
      module = (header[1] as string).replace(/^.*node_modules\//, "");
      start = i;
      lines[i] = `__probe(${JSON.stringify(module)});${line}`;
    } else if (/^var /.test(line) && /^(shared|functions)\//.test(module)) {
      lines[i] = `__probe(${JSON.stringify(`${module}:${i - start} ${line.slice(4, 40)}`)});${line}`;
    }
  }
  const counted = lines.join("\n").replace(/(\n {2}function _\d*\(def\) \{\n)/, "$1    globalThis.__schemas++;\n");
  if (counted === lines.join("\n")) throw new Error("zod's $constructor was not found: the count needs updating");
  return counted;
}

/** One evaluation (in this process): CPU ms and zod schemas per probe, and the first request's. */
async function evaluateOnce(script: string): Promise<Array<[string, number, number]>> {
  // Node loads its fetch classes on their first use: loaded here, so the request is not billed for them.
  await new Response(new Request("http://localhost/", { method: "POST", body: "{}" }).body).text();
  new TextDecoder().decode(new TextEncoder().encode("x"));
  const probes: Array<[string, number, number]> = [];
  const cpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  const g = globalThis as unknown as { __schemas: number; __probe: (name: string) => void };
  g.__schemas = 0;
  g.__probe = (name) => probes.push([name, cpu(), g.__schemas]);
  const workers = new vm.SyntheticModule(["DurableObject", "WorkerEntrypoint", "env"], function (
    this: vm.SyntheticModule,
  ) {
    this.setExport("DurableObject", class {});
    this.setExport("WorkerEntrypoint", class {});
    this.setExport("env", {});
  });
  const worker = new vm.SourceTextModule(script, { identifier: "worker.js" });
  await worker.link(() => workers);
  await worker.evaluate();
  g.__probe("(the first GET /info)");
  const env = { KEY_PREFIX: "", UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9", UPSTASH_REDIS_REST_TOKEN: "unused" };
  // The Worker's fetch handler, with what it reads of a request's execution context.
  type Fetch = (request: Request, bindings: typeof env, context: object) => Promise<Response>;
  const handler = (worker.namespace as { default: { fetch: Fetch } }).default;
  const context = { waitUntil() {}, passThroughOnException() {}, props: {} };
  await (await handler.fetch(new Request("http://localhost/info"), env, context)).text();
  g.__probe("(end)");
  return probes.slice(0, -1).map(([name, at, made], i) => {
    const [, nextAt, nextMade] = probes[i + 1] as [string, number, number];
    return [name, nextAt - at, nextMade - made];
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

/** Which part of the script a probe's name belongs to: a package, or a folder of this repository. */
function part(name: string): string {
  const file = name.split(":")[0] as string;
  if (file.startsWith("(")) return file;
  if (file.startsWith("functions/api/routes/")) return "functions/api/routes";
  if (/^(shared|functions)\//.test(file)) return file.split("/").slice(0, 2).join("/");
  const parts = file.split("/");
  return file.startsWith("@") ? parts.slice(0, 2).join("/") : file.startsWith("zod/") ? "zod" : (parts[0] as string);
}

async function main() {
  const { values } = parseArgs({
    options: {
      runs: { type: "string", default: "3" },
      top: { type: "string", default: "30" },
      child: { type: "string" },
    },
  });
  if (values.child) {
    // One evaluation, in a process of its own (a fresh V8): its figures as JSON on stdout.
    process.stdout.write(JSON.stringify(await evaluateOnce(readFileSync(values.child, "utf8"))));
    return;
  }
  const dir = mkdtempSync(path.join(tmpdir(), "worker-modules-"));
  try {
    const file = path.join(dir, "instrumented.js");
    (await import("node:fs")).writeFileSync(file, instrument(await bundle(dir)));
    const runs: Array<Array<[string, number, number]>> = [];
    for (let i = 0; i < Number(values.runs); i++) {
      const args = ["--experimental-vm-modules", "--no-warnings", "--import", "tsx", fileURLToPath(import.meta.url)];
      const child = spawn(process.execPath, [...args, "--child", file], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      await new Promise((resolve) => child.once("exit", resolve));
      runs.push(JSON.parse(out) as Array<[string, number, number]>);
    }
    report(runs, Number(values.top));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Prints the parts of the script and its costliest statements: median CPU ms and schemas built. */
function report(runs: Array<Array<[string, number, number]>>, top: number) {
  const byProbe = new Map<string, { ms: number[]; schemas: number }>();
  for (const run of runs)
    for (const [name, ms, schemas] of run) {
      const entry = byProbe.get(name) ?? { ms: [], schemas };
      entry.ms.push(ms);
      byProbe.set(name, entry);
    }
  const rows = [...byProbe].map(([name, { ms, schemas }]) => ({ name, ms: median(ms), schemas }));
  const parts = new Map<string, { ms: number; schemas: number }>();
  for (const row of rows) {
    const p = parts.get(part(row.name)) ?? { ms: 0, schemas: 0 };
    parts.set(part(row.name), { ms: p.ms + row.ms, schemas: p.schemas + row.schemas });
  }
  const line = (ms: number, schemas: number, name: string) =>
    console.log(`${ms.toFixed(1).padStart(8)}${String(schemas).padStart(9)}  ${name}`);
  const evaluated = rows.filter((r) => !r.name.startsWith("("));
  const ms = evaluated.reduce((total, r) => total + r.ms, 0);
  const schemas = evaluated.reduce((total, r) => total + r.schemas, 0);
  console.log(
    `Evaluating the script (Node, medians of ${runs.length}): ${ms.toFixed(1)} ms of CPU, ${schemas} zod schemas`,
  );
  console.log(`${"ms".padStart(8)}${"schemas".padStart(9)}  part`);
  for (const [name, p] of [...parts].sort((a, b) => b[1].ms - a[1].ms)) line(p.ms, p.schemas, name);
  console.log(`The costliest ${top} modules and statements of the script:`);
  for (const r of rows.sort((a, b) => b.ms - a.ms).slice(0, top)) line(r.ms, r.schemas, r.name);
}

await main();
