import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../infra/redis-server.js";
import type { FlowView } from "../../shared/model/index.js";
import { expectOneErrorLine, newUser, register, startFlowc, type User } from "../support/flowc.js";
import type { WatchedProcess } from "../support/process.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * Flows through the CLI as a user runs them: real `flowc` processes against a real `wrangler dev`
 * Worker, with the reference runner started by `flowc runner start` running the python and sh
 * jobs of examples/. Output is read from pipes, so it is the plain-lines form (no progress bar).
 */

const tmp = mkdtempSync(path.join(tmpdir(), "flowc-flows-test-"));
let worker: TestWorker | undefined;

const owner = newUser(tmp, "owner", { profileVar: true });
let contextId = "";
/** `flowc runner start`'s process, which runs the reference runner. */
let runner: WatchedProcess | undefined;
/** The diamond's flow id, once the first test submitted it. */
let diamondId = "";
/** The registered runner's id. */
let runnerId = "";
let failingId = "";

/** A user registered as an actor; returns the actor's id. */
async function registered(who: User): Promise<string> {
  return String(await register(who, (worker as TestWorker).url));
}

beforeAll(async () => {
  worker = await startTestWorker("cli-flows", tmp);

  await registered(owner);
  const created = await owner.run("context", "create");
  expect(created.code, created.stderr).toBe(0);
  contextId = /^context (\d+) created/.exec(created.stdout)?.[1] as string;
  const runnerKey = path.join(owner.home, "runner.json");
  expect((await owner.run("keygen", "--out", runnerKey)).code).toBe(0);
  const port = await freePort();
  const runnerReg = await owner.run(
    "runner",
    "register",
    contextId,
    "--key-file",
    runnerKey,
    "--type",
    "python",
    "--script-types",
    "python,sh",
    "--concurrency",
    "3",
    "--address",
    `http://127.0.0.1:${port}/`,
  );
  expect(runnerReg.code, runnerReg.stderr).toBe(0);
  runnerId = /^runner (\d+) registered/.exec(runnerReg.stdout)?.[1] as string;

  runner = startFlowc(
    [
      "runner",
      "start",
      contextId,
      runnerId,
      "--key-file",
      runnerKey,
      "--listen",
      `127.0.0.1:${port}`,
      "--work-dir",
      path.join(tmp, "work"),
    ],
    owner.env,
  );
  // Without --concurrency it takes the registered one (and the registered script types).
  await runner.waitForLine(/listening on http:\/\/127\.0\.0\.1:\d+\/ \(concurrency 3, batch \d+, python, sh\)/, 30_000);
});

afterAll(async () => {
  await runner?.kill();
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const example = (name: string) => path.join("examples", name);

describe("flowc flows", () => {
  it("submits, starts and watches the diamond: a line per job, the result per job key, exit 0", async () => {
    const run = await owner.run("flow", "submit", contextId, example("diamond.yaml"), "--start", "--watch");
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stderr).toBe("");
    expect(run.stdout).not.toContain("\x1b"); // not a terminal: plain lines only
    // Named after its file, running in plain words.
    diamondId =
      /^flow (\d+) submitted to context \d+ as "diamond" \(4 jobs: fetch, square, double, sum\); running$/m.exec(
        run.stdout,
      )?.[1] as string;
    expect(Number(diamondId)).toBeGreaterThan(0);
    const lines = run.stdout.split("\n");
    for (const [key, result] of [
      ["fetch", "n=7"],
      ["square", "n=49"],
      ["double", "n=14"],
      ["sum", "total=63"],
    ]) {
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^  \\[[1-4]/4\\] ✓ ${key} finished  ${result}$`)));
    }
    expect(lines.filter((l) => /✓ \w+ finished/.test(l)).at(-1)).toMatch(/^ {2}\[4\/4\] /);
    const summary = run.stdout.slice(run.stdout.indexOf(`flow ${diamondId} finished`));
    expect(summary).toMatch(
      new RegExp(
        `^flow ${diamondId} finished( in .*)?\\nresult:\\n {2}fetch {3}n=7\\n {2}square {2}n=49\\n {2}double {2}n=14\\n {2}sum {5}total=63\\n$`,
      ),
    );

    const json = await owner.run("flow", "watch", contextId, diamondId, "--json");
    expect(json.code, json.stderr).toBe(0);
    const view = JSON.parse(json.stdout) as FlowView;
    expect(view.result).toEqual({ fetch: { n: "7" }, square: { n: "49" }, double: { n: "14" }, sum: { total: "63" } });
  });

  it("shows the DAG layered by dependency, the flow, and lists finished flows", async () => {
    const dag = await owner.run("flow", "dag", contextId, diamondId);
    expect(dag.code, dag.stderr).toBe(0);
    const lines = dag.stdout.trimEnd().split("\n");
    expect(lines[0]).toBe(`flow ${diamondId} finished: 4 jobs in 3 layers, 4 dependencies (← reads "depends on")`);
    expect(lines[1]).toMatch(/^ 1 {2}✓ fetch {3}sh {6}finished\s+runner \d+$/);
    expect(lines[2]).toMatch(/^ 2 {2}✓ square {2}python {2}finished {2}← fetch\s+runner \d+$/);
    expect(lines[3]).toMatch(/^ {4}✓ double {2}sh {6}finished {2}← fetch\s+runner \d+$/);
    expect(lines[4]).toMatch(/^ 3 {2}✓ sum {5}python {2}finished {2}← square, double {2}runner \d+$/);

    const show = await owner.run("flow", "show", contextId, diamondId);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/^name\s+diamond$/m);
    expect(show.stdout).toMatch(/^trigger\s+manual$/m);
    expect(show.stdout).toMatch(/^status\s+finished$/m);
    expect(show.stdout).toMatch(/^progress\s+4 of 4 jobs ended \(4 finished, 0 failed, 0 running\)$/m);
    expect(show.stdout).toMatch(/^env_vars\s+BASE=7, UNIT=widgets$/m);
    expect(show.stdout).toMatch(/^sum\s+\d+\s+python\s+✓ finished\s+1\s+\d+\s+square, double\s+total=63$/m);

    const list = await owner.run("flow", "list", contextId, "--status", "finished");
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^ID\s+NAME\s+STATUS\s+TRIGGER\s+PRIORITY\s+PROGRESS\s+CREATED\s+ENDED\s+WHY$/m);
    expect(list.stdout).toMatch(
      new RegExp(`^${diamondId}\\s+diamond\\s+finished\\s+manual\\s+0\\s+4/4\\s+\\S+Z\\s+\\S+Z$`, "m"),
    );
    expect(list.stdout).toMatch(/finished flows? in context \d+$/m);
    expectOneErrorLine(
      await owner.run("flow", "list", contextId, "--status", "done"),
      2,
      /--status must be one of created, running, failed, compensation-failed, dispatched, started, error, finished/,
    );
  });

  it("names flows after their files or --name, labels them, and lists them by name, label and status", async () => {
    const other = /^context (\d+) created/.exec((await owner.run("context", "create")).stdout)?.[1] as string;
    const submit = async (...args: string[]) => {
      const run = await owner.run("flow", "submit", other, example("diamond.yaml"), ...args);
      expect(run.code, run.stderr).toBe(0);
      return /^flow (\d+) /m.exec(run.stdout)?.[1] as string;
    };
    const plain = await submit();
    const prod = await submit("--name", "nightly diamond", "--label", "env=prod", "--label", "team=data");
    const dev = await submit("--name", "nightly diamond", "--label", "env=dev");
    const shown = await owner.run("flow", "show", other, prod);
    expect(shown.stdout).toMatch(/^name\s+nightly diamond$/m);
    expect(shown.stdout).toMatch(/^labels\s+env=prod team=data$/m);
    expect(shown.stdout).toMatch(/^status\s+created$/m);

    const byName = await owner.run("flow", "list", other, "--name", "NIGHTLY", "--newest");
    expect(byName.code, byName.stderr).toBe(0);
    const ids = (text: string) => [...text.matchAll(/^(\d+) {2,}/gm)].map((m) => m[1]);
    expect(ids(byName.stdout)).toEqual([dev, prod]);
    expect(byName.stdout).toMatch(/^2 flows matched in context \d+$/m);
    const byLabel = await owner.run("flow", "list", other, "--label", "env=prod", "--label", "team", "--show-labels");
    expect(byLabel.stdout).toMatch(
      /^ID\s+NAME\s+STATUS\s+TRIGGER\s+PRIORITY\s+PROGRESS\s+CREATED\s+ENDED\s+LABELS\s+WHY$/m,
    );
    expect(byLabel.stdout).toMatch(
      new RegExp(
        `^${prod}\\s+nightly diamond\\s+created\\s+manual\\s+0\\s+0/4\\s+\\S+Z\\s+-\\s+env=prod team=data$`,
        "m",
      ),
    );
    expect(ids(byLabel.stdout)).toEqual([prod]);
    const created = await owner.run("flow", "list", other, "--status", "created", "--name", "diamond");
    expect(ids(created.stdout)).toEqual([plain, prod, dev]);
    const none = await owner.run("flow", "list", other, "--label", "env:staging");
    expect(none.stdout.trim()).toBe(`no flow matches in context ${other} at this offset`);
    expectOneErrorLine(
      await owner.run("flow", "list", other, "--label", "bad key=x"),
      1,
      /^flowc: 400 .*query\.label.*not a label filter/,
    );
    const json = JSON.parse((await owner.run("flow", "list", other, "--label", "env=dev", "--json")).stdout) as {
      items: { id: number; status: string; labels: Record<string, string> }[];
    };
    // --json keeps the API's own names.
    expect(json.items.map((f) => [f.id, f.status, f.labels])).toEqual([[Number(dev), "dispatched", { env: "dev" }]]);
  });

  it("exits 1 for the failing flow, naming the job and its reason, and never runs its dependent", async () => {
    const run = await owner.run("flow", "submit", contextId, example("failing.yaml"), "--start", "--watch");
    expect(run.code, run.stdout + run.stderr).toBe(1);
    failingId = /^flow (\d+) submitted/m.exec(run.stdout)?.[1] as string;
    expect(run.stdout).toMatch(/^ {2}\[\d\/3\] ✓ download finished {2}bytes=1024, checksum=5e8848$/m);
    expect(run.stdout).toMatch(/^ {2}\[\d\/3\] ✗ verify failed: exit code 3$/m);
    expect(run.stdout).toMatch(/^\s+stderr \| checksum mismatch: expected 9f86d0, got 5e8848$/m);
    expect(run.stdout).toMatch(/^ {2}\[3\/3\] – publish not run: dependency verify failed$/m);
    expect(run.stdout).toMatch(new RegExp(`^flow ${failingId} failed.*: job verify failed: exit code 3$`, "m"));
    expect(run.stdout).toMatch(/^not run:\n {2}publish {2}dependency verify failed$/m);

    const show = await owner.run("flow", "show", contextId, failingId);
    expect(show.stdout).toMatch(/^publish\s+\d+\s+sh\s+– not run\s+0\s+-\s+verify\s+dependency verify failed$/m);
    // The runner logs a job's end once its result was answered: the flow may end first.
    await runner?.waitForLine(/\(verify, flow \d+, attempt 1, python\) end: error/);
    expect(runner?.output()).not.toMatch(/\(publish, /);
    const listed = await owner.run("flow", "list", contextId, "--status", "failed");
    expect(listed.stdout).toMatch(
      new RegExp(`^${failingId}\\s+failing\\s+failed\\s+manual\\s+0\\s+3/3\\s+.*job verify failed: exit code 3$`, "m"),
    );
  });

  it("returns the first flow for a repeated idempotency key, and starts and watches it later", async () => {
    const submitNightly = () =>
      owner.run("flow", "submit", contextId, example("diamond.yaml"), "--idempotency-key", "nightly-1");
    const first = await submitNightly();
    expect(first.code, first.stderr).toBe(0);
    const id = /^flow (\d+) submitted .*; not started \(flowc flow start \d+ \d+\)$/m.exec(first.stdout)?.[1];
    const again = await submitNightly();
    expect(again.stdout).toMatch(new RegExp(`^flow ${id} already submitted with idempotency key nightly-1 `));
    const started = await owner.run("flow", "start", contextId, id as string, "--watch");
    expect(started.code, started.stdout + started.stderr).toBe(0);
    expect(started.stdout).toMatch(/✓ sum finished {2}total=63$/m);
  });

  it("reads the inbox (flow results), sends messages between actors, and pops them", async () => {
    const inbox = await owner.run("inbox", contextId);
    expect(inbox.code, inbox.stderr).toBe(0);
    expect(inbox.stdout).toMatch(new RegExp(`^ {2}flow ${diamondId} finished\\n {4}fetch {3}n=7$`, "m"));
    expect(inbox.stdout).toMatch(new RegExp(`^ {2}flow ${failingId} failed: job verify failed: exit code 3$`, "m"));
    expect(inbox.stdout).toMatch(/left in the inbox \(--pop takes them off\)$/m);

    const bob = newUser(tmp, "bob", { profileVar: true });
    const bobId = await registered(bob);
    expect((await owner.run("context", "grant", contextId, "readers", bobId)).code).toBe(0);
    const sent = await owner.run(
      "message",
      "send",
      contextId,
      "--to",
      bobId,
      "--type",
      "mail",
      "--subject",
      "hello",
      "first line\nsecond line",
    );
    expect(sent.code, sent.stderr).toBe(0);
    const messageId = new RegExp(
      `^message (\\d+) sent to actor ${bobId} in context ${contextId} \\(mail, text\\)$`,
    ).exec(sent.stdout.trim())?.[1];
    expect(Number(messageId)).toBeGreaterThan(0);

    const read = await bob.run("inbox", contextId, "--pop");
    expect(read.code, read.stderr).toBe(0);
    expect(read.stdout).toMatch(new RegExp(`^message ${messageId} from actor \\d+ {2}mail/text {2}\\S+Z`, "m"));
    expect(read.stdout).toContain("  subject: hello\n  | first line\n  | second line\n");
    expect(read.stdout).toMatch(/^1 message taken off the inbox$/m);
    expect((await bob.run("inbox", contextId)).stdout.trim()).toBe(
      `no messages for actor ${bobId} in context ${contextId}`,
    );

    expectOneErrorLine(await owner.run("message", "send", contextId, "hi"), 2, /missing option --to/);
    expectOneErrorLine(
      await owner.run("message", "send", contextId, "--to", bobId, "--type", "memo", "hi"),
      2,
      /--type must be one of chat, mail/,
    );
  });

  it("lists the failed job as a dead letter, re-runs the flow from it, and cancels a flow", async () => {
    const letters = await owner.run("deadletter", "list", contextId);
    expect(letters.code, letters.stderr).toBe(0);
    const id = letters.stdout
      .split("\n")
      .find((l) => l.startsWith(`${failingId}:`))
      ?.split(/\s+/)[0] as string;
    expect(letters.stdout).toContain(`${id}  job   verify`);
    expect(id).toMatch(/^\d+:\d+:1$/);
    const shown = await owner.run("deadletter", "show", contextId, id);
    expect(shown.stdout).toMatch(/^reason\s+exit code 3$/m);
    // Deleted once dealt with; deleting it again answers the same.
    for (let i = 0; i < 2; i++) {
      const deleted = await owner.run("deadletter", "delete", contextId, id);
      expect(deleted.code, deleted.stderr).toBe(0);
      expect(deleted.stdout.trim()).toBe(`dead letter ${id} deleted`);
    }
    expectOneErrorLine(await owner.run("deadletter", "show", contextId, id), 1, /^flowc: 404 /);

    // The failing job fails again the same way; what matters is that only it (and not download) runs again.
    const rerun = await owner.run("flow", "rerun", contextId, failingId);
    expect(rerun.code, rerun.stderr).toBe(0);
    expect(rerun.stdout).toMatch(new RegExp(`^flow ${failingId} running again, run 2: verify, publish`, "m"));
    const watched = await owner.run("flow", "watch", contextId, failingId);
    expect(watched.code).toBe(1);
    expect(runner?.output().match(/\(download, flow \d+, attempt \d+, sh\) start/g) ?? []).toHaveLength(1);
    // The runner logs a job's end once its result was answered: the flow may end first.
    await runner?.waitForLine(/\(verify, flow \d+, attempt 2, python\) end: error/);

    await owner.run("context", "pause", contextId);
    const held = await owner.run("flow", "submit", contextId, example("diamond.yaml"), "--start");
    const heldId = /^flow (\d+) submitted/m.exec(held.stdout)?.[1] as string;
    const cancelled = await owner.run("flow", "cancel", contextId, heldId, "--reason", "not today");
    expect(cancelled.stdout).toMatch(new RegExp(`^flow ${heldId} cancelled: not today$`, "m"));
    // The flow's own reason, said once (it read "cancelled: cancelled: not today").
    expect((await owner.run("flow", "show", contextId, heldId)).stdout).toMatch(/^error\s+cancelled: not today$/m);
    expect((await owner.run("context", "resume", contextId)).stdout).toMatch(/dispatch resumed$/m);
  });

  it("says why a job waits (flow show) and how dispatch stands with a runner (runner show)", async () => {
    const file = path.join(tmp, "unserved.json");
    writeFileSync(file, JSON.stringify({ jobs: [{ name: "in-v", script: "x", script_type: "v" }] }));
    const submitted = await owner.run("flow", "submit", contextId, file, "--start", "--json");
    expect(submitted.code, submitted.stderr).toBe(0);
    const flowId = String((JSON.parse(submitted.stdout) as FlowView).id);
    const shown = await owner.run("flow", "show", contextId, flowId);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/^in-v .* waits: no runner of script type v is registered$/m);
    const runnerShown = await owner.run("runner", "show", contextId, runnerId);
    expect(runnerShown.code, runnerShown.stderr).toBe(0);
    expect(runnerShown.stdout).toMatch(/^in flight +0 of \d+$/m);
    expect((await owner.run("flow", "cancel", contextId, flowId)).code).toBe(0);
  });

  it("shows and sets a context's retention, and deletes an ended flow", async () => {
    const shown = await owner.run("context", "show", contextId);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/^keep finished\s+7d \(default\)$/m);
    expect(shown.stdout).toMatch(/^flows\s+\d+ submitted, \d+ running, \d+ finished, \d+ error$/m);
    const set = await owner.run("context", "retention", contextId, "--finished", "12h", "--dead-letters", "50");
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/^keep finished\s+12h$/m);
    expect(set.stdout).toMatch(/^dead letters max\s+50$/m);
    const back = await owner.run("context", "retention", contextId, "--finished", "default");
    expect(back.stdout).toMatch(/^keep finished\s+7d \(default\)$/m);
    expectOneErrorLine(
      await owner.run("context", "retention", contextId, "--error", "soon"),
      2,
      /--error must be a duration/,
    );

    const deleted = await owner.run("flow", "delete", contextId, diamondId);
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(deleted.stdout.trim()).toBe(`flow ${diamondId} deleted`);
    expectOneErrorLine(await owner.run("flow", "show", contextId, diamondId), 1, /^flowc: 404 /);
    expectOneErrorLine(await owner.run("flow", "delete", contextId, diamondId), 1, /^flowc: 404 /);
  });

  it("drains the runner on SIGTERM through flowc runner start, which exits with the runner's code", async () => {
    expectOneErrorLine(await owner.run("runner", "start", contextId, "1"), 2, /missing option --key-file/);
    const runnerKey = path.join(owner.home, "runner.json");
    expectOneErrorLine(
      await owner.run("runner", "start", contextId, "99", "--key-file", runnerKey),
      1,
      new RegExp(`runner 99 is not registered in context ${contextId}`),
    );
    // A fleet member's options, checked before anything starts.
    const start = ["runner", "start", contextId, runnerId, "--key-file", runnerKey];
    expectOneErrorLine(
      await owner.run(...start, "--mode", "fleet", "--nats", "nats://127.0.0.1:4222"),
      2,
      /--mode must be gateway, worker or combined, not "fleet"/,
    );
    expectOneErrorLine(await owner.run(...start, "--mode", "gateway"), 2, /--mode gateway needs --nats <url>/);
    expectOneErrorLine(await owner.run(...start, "--nats", "nats://127.0.0.1:4222"), 2, /--nats goes with --mode/);
    expectOneErrorLine(
      await owner.run(...start, "--mode", "worker", "--nats", "nats://127.0.0.1:4222", "--pull"),
      2,
      /a worker takes its jobs from NATS: --listen and --pull are for the gateway/,
    );
    const r = runner as NonNullable<typeof runner>;
    r.child.kill("SIGTERM");
    expect(await r.exited).toEqual({ code: 0, signal: null });
    // Its output, read to the end of the pipe (the exit can come before the last lines are read).
    await r.waitForLine(/SIGTERM: draining/);
    await r.waitForLine(/drained/);
  });
});
