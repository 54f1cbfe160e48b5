import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { availableParallelism, loadavg, tmpdir } from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import { parseArgs } from "node:util";
import { gzipSync } from "node:zlib";
import { buildWorker } from "./wrangler-build.js";

/**
 * The Worker's size and cold start, as docs/cost-and-performance.md states them (Cold start):
 *
 *   npm run size [-- --runs 21] [--json file] [-- <more wrangler deploy flags, e.g. --minify>]
 *   npm run size -- --script some/index.js     (an already built script instead)
 *   npm run size -- --keep /tmp/old.js         (keeps the built script, to compare against later)
 *   npm run size -- --against /tmp/old.js      (and another build's script, started in turn)
 *   npm run size -- --phases                   (and how much of the start is compiling it)
 *
 * 1. Builds the Worker exactly as `wrangler deploy` would (`--dry-run --outdir`), and prints its
 *    size, raw and gzipped (what wrangler reports as the upload), with the packages that make it up
 *    (esbuild's metafile).
 * 2. Starts a fresh workerd process on that script, alone (no wrangler, no miniflare in front), and
 *    times spawn → listening and spawn → first answer to `GET /info` (a route that touches no
 *    storage). workerd compiles the script and evaluates its top level before it listens, so the
 *    first figure holds the script's startup; the second adds the first request (lazily compiled
 *    functions, the router's first match). Inside an isolate the clock stands still while code
 *    runs, so the time is taken from outside. The same is done, alternating, for a Worker of one
 *    line; the difference is the cost of this Worker's script, the rest is workerd's own start.
 *    Wall clock and CPU time (workerd's threads, Linux only): the CPU figures are the ones to
 *    compare, since the clock also counts waiting for a core on a busy machine.
 * 3. With `--against`: another script (say the build of the commit before a change, saved with
 *    `--keep`) started in the same rounds, each round this Worker, the other, the one-line
 *    Worker, so a change is told from a busy machine's drift; its figures are printed below, and
 *    what the change saved, paired round by round.
 * 4. With `--phases`: a third Worker, the one-line one with this script beside it as a module that
 *    nothing imports. workerd compiles every module of a Worker before it listens, imported or not,
 *    and evaluates one only when it is imported (measured: a 950 KiB module imported by nothing
 *    added 78 ms of CPU to the one-line Worker's start, its first `import()` 110 ms more). So that
 *    start less the one-line Worker's is compiling the script, and this Worker's start less that
 *    one is evaluating its top level.
 */

const requireHere = createRequire(import.meta.url);

/**
 * One start of workerd: milliseconds from spawn to listening, and to the first answer; and the
 * CPU time workerd had used by then (all its threads), which a busy machine disturbs far less
 * than the wall-clock figures.
 */
interface Start {
  listenMs: number;
  answerMs: number;
  listenCpuMs: number;
  answerCpuMs: number;
}

/** CPU time a process has used, in ms: the sum of its threads' time on a CPU (Linux schedstat, ns). */
function cpuMs(pid: number): number {
  if (!existsSync(`/proc/${pid}/task`)) return Number.NaN;
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // the thread ended in between
    }
  }
  return ns / 1e6;
}

/** Bundles the Worker as `wrangler deploy` does, with its metafile beside the script (contributors). */
function bundle(outdir: string, extra: string[]): Promise<string> {
  return buildWorker(outdir, ["--metafile", path.join(outdir, "meta.json"), ...extra]);
}

/** The script's bytes by package (or by top folder of this repository), largest first. */
function contributors(metafile: string): Array<[string, number]> {
  const meta = JSON.parse(readFileSync(metafile, "utf8")) as {
    outputs: Record<string, { inputs: Record<string, { bytesInOutput: number }> }>;
  };
  const output = Object.entries(meta.outputs).find(([name]) => name.endsWith(".js"))?.[1];
  const totals = new Map<string, number>();
  for (const [file, { bytesInOutput }] of Object.entries(output?.inputs ?? {})) {
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)(?:\/(v4\/\w+))?/.exec(file);
    // zod is most of the script: split it into its parts (core, classic, locales).
    const key = pkg
      ? pkg[1] === "zod" && pkg[2]
        ? `zod/${pkg[2]}`
        : (pkg[1] ?? file)
      : file.split("/").slice(0, 2).join("/");
    totals.set(key, (totals.get(key) ?? 0) + bytesInOutput);
  }
  return [...totals].sort((a, b) => b[1] - a[1]);
}

/** The wrangler.toml settings the script reads, as workerd config (text bindings). */
const VARS: Record<string, string> = {
  KEY_PREFIX: "",
  REDIS_TIMEOUT_MS: "5000",
  SIGNATURE_SKEW_SECONDS: "300",
  ACTOR_REGISTRATION: "open",
  ACTOR_ALLOWLIST: "",
  OPERATOR_PUBKEYS: "",
  ALLOW_INSECURE_HTTP: "false",
  KEY_CACHE_SECONDS: "300",
  RETRY_BASE_MS: "1000",
  RETRY_CAP_MS: "60000",
  // Never reached: /info touches no storage.
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
  UPSTASH_REDIS_REST_TOKEN: "unused",
};
const DURABLE_OBJECTS: Record<string, string> = {
  FLOW_COORDINATOR: "FlowCoordinator",
  DISPATCHER: "Dispatcher",
  CONTEXT_FEED: "ContextFeed",
  SCHEDULER: "Scheduler",
};

/** A workerd config serving `script` (relative to the config's folder) on a port workerd picks. */
function workerdConfig(script: string, withBindings: boolean, unimported?: string): string {
  const bindings = withBindings
    ? [
        ...Object.entries(VARS).map(
          ([name, value]) => `(name = ${JSON.stringify(name)}, text = ${JSON.stringify(value)})`,
        ),
        ...Object.entries(DURABLE_OBJECTS).map(
          ([name, cls]) => `(name = "${name}", durableObjectNamespace = "${cls}")`,
        ),
      ]
    : [];
  const namespaces = withBindings
    ? Object.values(DURABLE_OBJECTS).map((cls) => `(className = "${cls}", uniqueKey = "${cls}", enableSql = true)`)
    : [];
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "main", worker = .worker)],
  sockets = [(name = "http", address = "127.0.0.1:0", http = (), service = "main")],
);
const worker :Workerd.Worker = (
  modules = [(name = "index.js", esModule = embed ${JSON.stringify(script)})${unimported ? `, (name = "unimported.js", esModule = embed ${JSON.stringify(unimported)})` : ""}],
  compatibilityDate = "2026-10-01",
  bindings = [${bindings.join(", ")}],
  durableObjectNamespaces = [${namespaces.join(", ")}],
  durableObjectStorage = (inMemory = void),
);
`;
}

/** workerd's binary: the one wrangler runs. */
function workerdBinary(): string {
  const fromWrangler = createRequire(requireHere.resolve("wrangler/package.json"));
  const miniflare = createRequire(fromWrangler.resolve("miniflare"));
  return (miniflare("workerd") as { default: string }).default;
}

/** Starts workerd on `config` once, times it, and stops it. */
async function startOnce(config: string): Promise<Start> {
  const started = performance.now();
  // workerd writes {"event":"listen","port":N} on the control fd (3) once its socket is open.
  const child = spawn(workerdBinary(), ["serve", config, "--control-fd=3"], {
    stdio: ["ignore", "ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  try {
    const port = await new Promise<number>((resolve, reject) => {
      let buffer = "";
      (child.stdio[3] as Readable).on("data", (d: Buffer) => {
        buffer += d.toString();
        const match = /"event":"listen"[^}]*"port":(\d+)/.exec(buffer);
        if (match) resolve(Number(match[1]));
      });
      child.once("exit", (code) => reject(new Error(`workerd exited (${code}):\n${stderr}`)));
    });
    const listenMs = performance.now() - started;
    const listenCpuMs = cpuMs(child.pid as number);
    const res = await fetch(`http://127.0.0.1:${port}/info`);
    await res.arrayBuffer();
    const answerMs = performance.now() - started;
    if (!res.ok) throw new Error(`GET /info answered ${res.status}:\n${stderr}`);
    return { listenMs, answerMs, listenCpuMs, answerCpuMs: cpuMs(child.pid as number) };
  } finally {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
};
const kib = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;

const ROWS: Array<[string, keyof Start]> = [
  ["spawn → listening", "listenMs"],
  ["spawn → first GET /info", "answerMs"],
  ["CPU to listening", "listenCpuMs"],
  ["CPU to first GET /info", "answerCpuMs"],
];

/**
 * The other script's figures (`--against`), medians over the rounds: its own, the one-line
 * Worker's, its script's share (the one-line start of the same round subtracted), and what this
 * script saves against it (this one's start subtracted from the other's of the same round).
 */
function compareWith(worker: Start[], other: Start[], empty: Start[]) {
  const row = (key: keyof Start) => ({
    other: median(other.map((s) => s[key])),
    oneLine: median(empty.map((s) => s[key])),
    script: median(other.map((s, i) => s[key] - (empty[i] as Start)[key])),
    saved: median(other.map((s, i) => s[key] - (worker[i] as Start)[key])),
  });
  return Object.fromEntries(ROWS.map(([, key]) => [key, row(key)])) as Record<keyof Start, ReturnType<typeof row>>;
}

/**
 * `--phases`: the script's start split, round by round, into compiling (the one-line Worker with
 * the script beside it, imported by nothing, less the one-line Worker alone), evaluating (this
 * Worker to listening less that), and the first request (to the first answer less to listening).
 */
function splitPhases(worker: Start[], compiled: Start[], empty: Start[]) {
  return {
    compileCpuMs: median(compiled.map((s, i) => s.listenCpuMs - (empty[i] as Start).listenCpuMs)),
    evaluateCpuMs: median(worker.map((s, i) => s.listenCpuMs - (compiled[i] as Start).listenCpuMs)),
    firstAnswerCpuMs: median(worker.map((s) => s.answerCpuMs - s.listenCpuMs)),
  };
}

async function main() {
  const { values, positionals } = parseArgs({
    options: {
      runs: { type: "string", default: "21" },
      json: { type: "string" },
      script: { type: "string" },
      against: { type: "string" },
      keep: { type: "string" },
      phases: { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  const runs = Number(values.runs);
  const dir = mkdtempSync(path.join(tmpdir(), "worker-startup-"));
  try {
    // --script: an already built script (its metafile, if any, next to it as meta.json).
    const built = values.script ? path.resolve(values.script) : await bundle(dir, positionals);
    const script = path.join(dir, "index.js");
    if (values.script) copyFileSync(built, script);
    const code = readFileSync(script);
    const gzip = gzipSync(code).length;
    console.log(`Worker script: ${kib(code.length)}, ${kib(gzip)} gzipped (${code.length} / ${gzip} bytes)`);
    const metafile = path.join(path.dirname(built), "meta.json");
    const parts = existsSync(metafile) ? contributors(metafile) : [];
    for (const [name, bytes] of parts.slice(0, 10))
      console.log(`  ${kib(bytes).padStart(11)}  ${((100 * bytes) / code.length).toFixed(0).padStart(2)}%  ${name}`);

    if (values.keep) copyFileSync(script, values.keep);
    writeFileSync(path.join(dir, "empty.js"), 'export default { fetch: () => new Response("ok") };\n');
    writeFileSync(path.join(dir, "worker.capnp"), workerdConfig("index.js", true));
    writeFileSync(path.join(dir, "empty.capnp"), workerdConfig("empty.js", false));
    writeFileSync(path.join(dir, "compile.capnp"), workerdConfig("empty.js", false, "index.js"));
    if (values.against) {
      copyFileSync(values.against, path.join(dir, "other.js"));
      writeFileSync(path.join(dir, "other.capnp"), workerdConfig("other.js", true));
    }
    // One start of each first, unmeasured: the binary and the files into the page cache.
    await startOnce(path.join(dir, "worker.capnp"));
    await startOnce(path.join(dir, "empty.capnp"));
    if (values.against) await startOnce(path.join(dir, "other.capnp"));
    const worker: Start[] = [];
    const empty: Start[] = [];
    const other: Start[] = [];
    const compiled: Start[] = [];
    for (let i = 0; i < runs; i++) {
      worker.push(await startOnce(path.join(dir, "worker.capnp")));
      if (values.against) other.push(await startOnce(path.join(dir, "other.capnp")));
      if (values.phases) compiled.push(await startOnce(path.join(dir, "compile.capnp")));
      empty.push(await startOnce(path.join(dir, "empty.capnp")));
    }
    // Each start of this Worker is paired with the one-line Worker's start right after it.
    const pick = (key: keyof Start) => ({
      worker: median(worker.map((s) => s[key])),
      oneLine: median(empty.map((s) => s[key])),
      script: median(worker.map((s, i) => s[key] - (empty[i] as Start)[key])),
    });
    const figures = {
      bytes: code.length,
      gzipBytes: gzip,
      runs,
      loadAverage: loadavg(),
      listenMs: pick("listenMs"),
      answerMs: pick("answerMs"),
      listenCpuMs: pick("listenCpuMs"),
      answerCpuMs: pick("answerCpuMs"),
      contributors: Object.fromEntries(parts),
    };
    const row = (label: string, f: ReturnType<typeof pick>) =>
      console.log(
        `  ${label.padEnd(26)}${f.worker.toFixed(1).padStart(8)}${f.oneLine.toFixed(1).padStart(10)}${f.script.toFixed(1).padStart(10)}`,
      );
    const load = loadavg()
      .map((x) => x.toFixed(2))
      .join(" ");
    console.log(`Fresh workerd, medians of ${runs} starts (${availableParallelism()} cores, load average ${load}):`);
    console.log(`  ${"ms".padEnd(26)}${"this".padStart(8)}${"one-line".padStart(10)}${"script".padStart(10)}`);
    row("spawn → listening", figures.listenMs);
    row("spawn → first GET /info", figures.answerMs);
    row("CPU to listening", figures.listenCpuMs);
    row("CPU to first GET /info", figures.answerCpuMs);
    if (values.against) {
      const against = compareWith(worker, other, empty);
      console.log(`Against ${values.against} (${kib(readFileSync(values.against).length)}), the same rounds:`);
      console.log(
        `  ${"ms".padEnd(26)}${"other".padStart(8)}${"one-line".padStart(10)}${"script".padStart(10)}${"saved".padStart(10)}`,
      );
      for (const [label, key] of ROWS) {
        const f = against[key];
        console.log(
          `  ${label.padEnd(26)}${f.other.toFixed(1).padStart(8)}${f.oneLine.toFixed(1).padStart(10)}${f.script.toFixed(1).padStart(10)}${f.saved.toFixed(1).padStart(10)}`,
        );
      }
      Object.assign(figures, { against: { script: values.against, ...against } });
    }
    if (values.phases) {
      const phases = splitPhases(worker, compiled, empty);
      console.log(`Of this script's share of CPU to listening (medians, paired in each round):`);
      console.log(`  compiling                 ${phases.compileCpuMs.toFixed(1).padStart(8)}`);
      console.log(`  evaluating its top level  ${phases.evaluateCpuMs.toFixed(1).padStart(8)}`);
      console.log(`  then the first GET /info  ${phases.firstAnswerCpuMs.toFixed(1).padStart(8)}`);
      Object.assign(figures, { phases });
    }
    if (values.json) writeFileSync(values.json, JSON.stringify(figures, null, 2) + "\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
