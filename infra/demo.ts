/**
 * `npm start`: the whole system once, end to end, as a user would drive it. Brings up a local
 * stack of its own (redis-server, the REST endpoint, wrangler dev) on free ports, then runs the
 * `flowc` CLI step by step: a key and a profile, an actor, a context, a runner (started with
 * `flowc runner start`), the diamond, failing and saga flows from examples/, the DAG, the approval
 * flow (a wait ended by `flowc event send`), the reminder flow (a wait that times out, a sleep),
 * the map, and the inbox; at the end, the console's links to its flows. Stops everything at the
 * end (with `--keep`: once Ctrl-C is pressed, exit 0), on Ctrl-C before the end (exit 130) and on
 * any failure (exit 1).
 *
 * The CLI and the runner are separate processes, never imported: infra/ may only import infra/
 * and shared/, and separate processes are also what a user runs.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdirSync, readFileSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { freePort } from "./redis-server.js";
import { startLocalStack, type LocalStack } from "./stack.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const demoDir = path.join(root, ".dev", "demo");
const rel = (file: string) => path.relative(root, file);
const files = {
  profile: path.join(demoDir, "profile.json"),
  actorKey: path.join(demoDir, "actor-key.json"),
  runnerKey: path.join(demoDir, "runner-key.json"),
  runnerLog: path.join(demoDir, "runner.log"),
  // Its own project-like folder: the stack keeps its .dev/ (Redis's folder, the Worker's env
  // file, Durable Object storage) there, so the demo never wipes the state of an `npm run dev`
  // running beside it. wrangler finds the project's wrangler.toml by looking upwards.
  stackRoot: path.join(demoDir, "stack"),
};

/** A step that did not go as expected: what the user sees before the demo exits 1. */
class StepFailed extends Error {
  override name = "StepFailed";
}

/** The environment of every flowc process: the demo's profile, none of the user's own settings. */
function cliEnv(): NodeJS.ProcessEnv {
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("FLOWC_") && !name.startsWith("RUNNER_")),
  );
  return { ...env, FLOWC_PROFILE: files.profile, NO_COLOR: "1" };
}

function flowcProcess(args: string[], detached = false): ChildProcess {
  return spawn(process.execPath, ["--import", "tsx", "cli/main.ts", ...args], {
    cwd: root,
    env: cliEnv(),
    stdio: ["ignore", "pipe", "pipe"],
    detached,
  });
}

/** Paths under the project shown relative to it, so the printed commands can be copied. */
function shown(args: string[]): string {
  return args.map((a) => (a.startsWith(root + path.sep) ? rel(a) : /\s/.test(a) ? JSON.stringify(a) : a)).join(" ");
}

const running = new Set<ChildProcess>();

/**
 * Runs `flowc <args>` with its output passed straight through (live, as it is printed) and
 * collected; fails unless it exits with `expected`.
 */
async function flowc(args: string[], expected = 0): Promise<string> {
  console.log(`\n$ flowc ${shown(args)}`);
  const child = flowcProcess(args);
  running.add(child);
  let stdout = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    stdout += chunk.toString();
    process.stdout.write(chunk);
  });
  child.stderr?.on("data", (chunk: Buffer) => process.stderr.write(chunk));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("close", (exitCode) => resolve(exitCode));
  });
  running.delete(child);
  if (code !== expected)
    throw new StepFailed(`flowc ${args.slice(0, 2).join(" ")} exited with ${code ?? "a signal"}, expected ${expected}`);
  return stdout;
}

/** The number a step's output names, e.g. the id in `context 1 created`. */
function idFrom(output: string, pattern: RegExp, what: string): string {
  const id = pattern.exec(output)?.[1];
  if (id === undefined) throw new StepFailed(`could not find the ${what} id in flowc's output`);
  return id;
}

/** The runner, started as `flowc runner start` in the background, its output going to a log file. */
interface BackgroundRunner {
  child: ChildProcess;
  stop(): Promise<void>;
}

async function startRunner(args: string[]): Promise<BackgroundRunner> {
  console.log(`\n$ flowc ${shown(args)} &    # in the background; its output goes to ${rel(files.runnerLog)}`);
  // Its own process group: the demo decides when it drains, not a Ctrl-C racing the demo's own.
  const child = flowcProcess(args, true);
  const log = createWriteStream(files.runnerLog);
  let seen = "";
  const listening = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new StepFailed("the runner did not start listening within 30 s")), 30_000);
    const onData = (chunk: Buffer) => {
      log.write(chunk);
      seen += chunk.toString();
      const line = seen.split("\n").find((l) => /listening on http/.test(l));
      if (line !== undefined) {
        clearTimeout(timer);
        resolve(line);
      }
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new StepFailed(`the runner exited (code ${code}) before listening:\n${seen.trim()}`));
    });
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    // The first SIGTERM drains (jobs finish and report); a second one would stop at once.
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGTERM"), 10_000);
    const killer = setTimeout(() => child.kill("SIGKILL"), 15_000);
    await exited;
    clearTimeout(timer);
    clearTimeout(killer);
    log.end();
  };
  try {
    console.log(`  ${(await listening).replace(/^\S+ /, "")}`);
  } catch (error) {
    await stop();
    throw error;
  }
  return { child, stop };
}

let stack: LocalStack | undefined;
let runner: BackgroundRunner | undefined;
let stopping: Promise<void> | undefined;

/** Stops what runs, in reverse order; once, whoever asks first (the end, a failure, a signal). */
function stopAll(): Promise<void> {
  stopping ??= (async () => {
    for (const child of running) child.kill("SIGTERM");
    await runner?.stop().catch(() => {});
    await stack?.stop().catch(() => {});
  })();
  return stopping;
}

/** What the demo made, for the console's links at its end. */
interface DemoRun {
  url: string;
  actorId: string;
  context: string;
  flows: { id: string; what: string }[];
}

async function demo(): Promise<DemoRun> {
  rmSync(demoDir, { recursive: true, force: true });
  mkdirSync(files.stackRoot, { recursive: true });
  console.log("flow coordinator demo: a local coordinator, then everything through the flowc CLI\n");
  const url = await startStack();
  const actorId = await registerActor(url);
  console.log("\n# A context (a tenant): the actor creating it becomes its admin.");
  const context = idFrom(await flowc(["context", "create"]), /^context (\d+) created/m, "context");
  await startDemoRunner(context);
  const flows = await runFlows(context);
  console.log("\n# Every flow's end also lands in the actor's inbox.");
  await flowc(["inbox", context]);
  return { url, actorId, context, flows };
}

/** The local stack: redis-server, the REST endpoint and the Worker, on free ports. */
async function startStack(): Promise<string> {
  // The stack's own lines name its folder relative to the stack's root: make them project-relative.
  const stackDir = `${rel(files.stackRoot)}/.dev/`;
  stack = await startLocalStack({
    root: files.stackRoot,
    redisPort: await freePort(),
    restPort: await freePort(),
    workerPort: await freePort(),
    log: (line) => console.log(line.replace(/(\s)\.dev\//g, `$1${stackDir}`)),
  });
  return stack.workerUrl;
}

/** An actor: a key pair, a profile naming the coordinator and the key, and registration. */
async function registerActor(url: string): Promise<string> {
  console.log("\n# An actor: a key pair, a profile naming the coordinator and the key, and registration.");
  await flowc(["keygen", "--out", files.actorKey]);
  await flowc(["init", "--url", url, "--key-file", files.actorKey]);
  return idFrom(await flowc(["actor", "register"]), /^actor (\d+) registered/m, "actor");
}

/** The reference runner, with a key of its own, registered for python and sh jobs pushed to it. */
async function startDemoRunner(context: string): Promise<void> {
  console.log(
    "\n# A runner with a key of its own, registered for python and sh jobs pushed to its address, then started.",
  );
  const runnerPort = await freePort();
  await flowc(["keygen", "--out", files.runnerKey]);
  const address = `http://127.0.0.1:${runnerPort}/`;
  const registered = await flowc(
    ["runner", "register", context, "--key-file", files.runnerKey, "--type", "python"].concat([
      "--script-types",
      "python,sh",
      "--concurrency",
      "4", // the diamond's two branches run side by side
      "--address",
      address,
    ]),
  );
  const runnerId = idFrom(registered, /^runner (\d+) registered/m, "runner");
  const listen = `127.0.0.1:${runnerPort}`;
  runner = await startRunner(["runner", "start", context, runnerId, "--key-file", files.runnerKey, "--listen", listen]);
}

/** The example flows, each submitted, started and watched to its end. */
async function runFlows(context: string): Promise<DemoRun["flows"]> {
  console.log("\n# A diamond of python and sh jobs handing results to each other (examples/diamond.yaml).");
  const flowId = await runExample(context, "diamond.yaml");
  await flowc(["flow", "dag", context, flowId]);
  console.log("\n# A flow that fails on purpose (examples/failing.yaml): flowc exits 1 for it, as expected here.");
  const failingId = await runExample(context, "failing.yaml", 1);
  console.log("\n# A saga (examples/saga.yaml): ship fails, so it unwinds: a refund, then the booking cancelled.");
  const sagaId = await runExample(context, "saga.yaml", 1);
  const flows = [{ id: flowId, what: "the diamond" }];
  flows.push({ id: failingId, what: "the failing flow" }, { id: sagaId, what: "the saga" });
  flows.push(...(await runReactingFlows(context)));
  console.log("\n# A map (examples/map.yaml): list files, process each in a job of its own, summarize them all.");
  return [...flows, { id: await runExample(context, "map.yaml"), what: "the map" }];
}

/** Submits examples/<file>, started and watched to its end (flowc exits `code`); returns its flow's id. */
async function runExample(context: string, file: string, code = 0): Promise<string> {
  const run = await flowc(["flow", "submit", context, path.join(root, "examples", file), "--start", "--watch"], code);
  return idFrom(run, /^flow (\d+) submitted/m, "flow");
}

/**
 * The flows that wait: the approval (a wait for a human's event, which the demo sends as that
 * human would, then a branch on the answer) and the reminder (a wait that times out into a
 * reminder, a sleep, a clean-up), each without holding a runner while it waits.
 */
async function runReactingFlows(context: string): Promise<DemoRun["flows"]> {
  console.log(
    "\n# A flow that waits for a human's approval (examples/approval.yaml): no runner is held while it waits.",
  );
  const approvalFile = path.join(root, "examples", "approval.yaml");
  const approval = await flowc(["flow", "submit", context, approvalFile, "--start"]);
  const approvalId = idFrom(approval, /^flow (\d+) submitted/m, "flow");
  await waitForWait(context, approvalId);
  console.log("\n# The approver answers: an event with the order's number as its key ends the wait.");
  await flowc([
    "event",
    "send",
    context,
    "order.approved",
    "--key",
    "1042",
    "--data",
    "decision=yes",
    "--data",
    "by=alice",
  ]);
  await flowc(["flow", "watch", context, approvalId]);

  console.log(
    "\n# A reminder (examples/reminder.yaml): nobody pays, the wait times out into a reminder, a sleep, a close.",
  );
  const reminderId = await runExample(context, "reminder.yaml");
  return [
    { id: approvalId, what: "the approval" },
    { id: reminderId, what: "the reminder" },
  ];
}

/** Until the approval flow's wait has started (its request ran first): `flowc flow show` names it. */
async function waitForWait(context: string, flowId: string): Promise<void> {
  for (let i = 0; i < 60; i++) {
    const child = flowcProcess(["flow", "show", context, flowId]);
    let out = "";
    child.stdout?.on("data", (chunk: Buffer) => (out += chunk.toString()));
    await new Promise((resolve) => child.once("close", resolve));
    if (/waiting for event order\.approved/.test(out)) {
      console.log(`\n$ flowc flow show ${context} ${flowId}\n${out.trimEnd()}`);
      return;
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new StepFailed(`flow ${flowId}'s approval did not start waiting within 30 s`);
}

/**
 * Where to see the demo's flows in a browser: the console's page of each (its routes are
 * hash-based, so a link opens the page itself), and the key file to sign in with.
 */
function consoleLinks(run: DemoRun, keep: boolean): void {
  const base = `${run.url}/console/#/contexts/${run.context}`;
  const lines = [
    "",
    "The console: the demo's flows in a browser",
    ...run.flows.map((f) => `  ${base}/flows/${f.id}    ${f.what}`),
    `  ${base}    every flow of context ${run.context}, live`,
    `  Sign in by importing the demo actor's key file (actor ${run.actorId}): ${files.actorKey}`,
  ];
  if (!keep) lines.push("  (npm start -- --keep leaves the stack up to open them; this run stops it now.)");
  console.log(lines.join("\n"));
}

function epilogue(run: DemoRun, keep: boolean): void {
  const profile = rel(files.profile);
  const next = keep
    ? `  The demo's stack is yours until Ctrl-C: drive it with the demo actor's profile, e.g.
    FLOWC_PROFILE=${profile} npm run -s cli -- context watch ${run.context}     # live, in another terminal
    FLOWC_PROFILE=${profile} npm run -s cli -- flow submit ${run.context} examples/diamond.yaml --start --watch`
    : `  To drive a coordinator yourself:
    npm run dev                       # in one terminal: the same stack, on port 8787, until Ctrl-C
    alias flowc="npm run -s cli --"   # in another: then the commands above (after each $),
    flowc --help                      # as in README.md, "From nothing to a running flow with the CLI"`;
  console.log(`
What just happened
  A local coordinator came up: redis-server, the Upstash-compatible REST endpoint in front of it,
  and the Worker under wrangler dev. flowc made an actor (its key and profile are in
  ${rel(demoDir)}/), a context and a runner, and started the reference runner, which ran the
  jobs as real python and sh processes (its log: ${rel(files.runnerLog)}). The diamond's jobs
  passed their results along (DEP_<JOB>_<KEY>, FLOW_INPUTS); in the failing flow, verify exited 3
  with a reason on stderr, so publish never ran. The saga's ship failed, so it unwound: charge's
  compensation refunded, then book's cancelled the booking (compensated). The approval flow
  waited for an event, holding no runner, until flowc event send answered it, then shipped (the
  refusal and timeout branches were skipped); the reminder's wait timed out into a reminder, a
  sleep and a close; the map ran one job per file. Every flow's result also arrived in the inbox.
  ${keep ? "The stack and the runner are still up (--keep)." : "Everything was stopped again."}

What next
  Read and change the flow files in examples/ (diamond, failing, saga, approval, reminder, map,
  grow), and examples/README.md on writing your own (docs/flows.md: waits, sleeps, when, needs,
  compensations, maps).
${next}`);
}

const USAGE = "usage: npm start [-- --keep]   (--keep: leave the demo's stack up until Ctrl-C)";
const args = process.argv.slice(2);
if (args.some((a) => a !== "--keep")) {
  console.error(`demo: unknown argument ${JSON.stringify(args.find((a) => a !== "--keep"))}\n${USAGE}`);
  process.exit(2);
}
const keep = args.includes("--keep");

let interrupted = false;
/** While the kept stack waits for Ctrl-C: ends that wait (the demo then stops everything, exit 0). */
let release: (() => void) | undefined;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    if (release) return release();
    if (interrupted) return;
    interrupted = true;
    console.error(`\ndemo: ${signal}: stopping the runner and the stack`);
    void stopAll().then(() => process.exit(130));
  });
}

try {
  const run = await demo();
  if (!keep) await stopAll();
  epilogue(run, keep);
  consoleLinks(run, keep);
  if (keep) {
    console.log(`\nThe demo's stack stays up (coordinator ${run.url}) until Ctrl-C.`);
    await new Promise<void>((resolve) => (release = resolve));
    console.error("\ndemo: stopping the runner and the stack");
    await stopAll();
    console.error("demo: stopped");
  }
  process.exit(0);
} catch (error) {
  if (!interrupted) {
    console.error(`\ndemo failed: ${(error as Error).message}`);
    try {
      const log = readFileSync(files.runnerLog, "utf8").trim();
      if (log)
        console.error(`the runner's last lines (${rel(files.runnerLog)}):\n${log.split("\n").slice(-10).join("\n")}`);
    } catch {
      // no runner log yet: it failed before the runner started
    }
    await stopAll();
    process.exit(1);
  }
}
