import { writeFileSync } from "node:fs";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { ContextStreamEvent } from "../../shared/model/index.js";
import { actorEnv, expectOneErrorLine, flowc, startFlowc } from "../support/flowc.js";
import type { WatchedProcess } from "../support/process.js";
import { usePrivateStack } from "../support/use-private-stack.js";

/**
 * `flowc flow watch` and `flowc context watch` on the coordinator's event streams: real flowc
 * processes against a private stack (its own redis-server, REST endpoint and wrangler dev), with
 * the reference runner running the sh jobs. The Worker is restarted under a watch to drop its
 * connection. Output comes through pipes: plain lines, no progress bar.
 */

const fixture = usePrivateStack("cli-watch");
let env: Record<string, string> = {};
let contextId = 0;
let runnerId = 0;

beforeAll(async () => {
  const stack = fixture.stack();
  const admin = fixture.admin();
  env = actorEnv(stack, admin);
  contextId = (await admin.client.createContext()).id;
  // `started` reported for every job, however quick: the watch shows each job's start.
  const runner = await stack.registerReferenceRunner(admin.client, contextId, "push", ["--started-after", "0"]);
  runnerId = runner.id;
  await runner.start();
});

/** A long-running flowc process (a watch), its output watched; each test kills it at its end whatever happens. */
function flowcProcess(...args: string[]): WatchedProcess {
  return startFlowc(args, env);
}

const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  script_type: "sh" as const,
  script,
  timeout: 60,
  ...extra,
});

async function submit(body: FlowSubmissionInput, start = false): Promise<number> {
  return (await fixture.admin().client.submitFlow(contextId, { ...body, start })).id;
}

/** stdout's lines matching `pattern`. */
const linesOf = (proc: WatchedProcess, pattern: RegExp) =>
  proc
    .stdout()
    .split("\n")
    .filter((l) => pattern.test(l));

describe("flowc flow watch", () => {
  it("submit --start --watch and start --watch exit once a flow that ran past the stream's keep-alive ended", async () => {
    // They once hung after the summary with their socket open; the cause (an abort Node's fetch
    // lost after a garbage collection) is pinned down in test/unit/client-events.test.ts.
    const slow = 'sleep 16; echo "ok=1" > "$RESULT_FILE"'; // past the Worker's 15 s keep-alive
    const file = path.join(fixture.stack().dir, "slow.json");
    writeFileSync(file, JSON.stringify({ jobs: [sh("slow", slow)] }));
    const later = await submit({ jobs: [sh("slow", slow)] });
    const watches = [
      flowcProcess("flow", "submit", String(contextId), file, "--start", "--watch"),
      flowcProcess("flow", "start", String(contextId), String(later), "--watch"),
    ];
    try {
      for (const watch of watches) {
        await watch.waitForLine(/^flow \d+ finished in 1\d s$/, 60_000);
        const exited = await Promise.race([
          watch.exited,
          new Promise((r) => setTimeout(() => r("still running"), 5_000)),
        ]);
        expect(exited, watch.output()).toEqual({ code: 0, signal: null });
        await watch.waitForLine(/^ {2}slow {2}ok=1$/);
      }
    } finally {
      for (const watch of watches) await watch.kill();
    }
  });

  it("follows a flow started after the watch began, live, to its summary (exit 0)", async () => {
    const flowId = await submit({
      jobs: [
        sh("first", 'echo "n=1" > "$RESULT_FILE"'),
        sh("second", 'echo "n=2" > "$RESULT_FILE"', { depends: ["first"] }),
      ],
    });
    const watch = flowcProcess("flow", "watch", String(contextId), String(flowId));
    try {
      await watch.waitForLine(/is not started yet/);
      await fixture.admin().client.startFlow(contextId, flowId);
      expect(await watch.exited).toEqual({ code: 0, signal: null });
      await watch.waitForLine(/^ {2}second +n=2$/);
      expect(watch.stderr()).toBe("");
      const lines = watch.stdout().trimEnd().split("\n");
      // Everything after the hint came from the stream: the flow's start, then each job as it went.
      expect(lines.slice(0, 3)).toEqual([
        `watching flow ${flowId} in context ${contextId}: 2 jobs (first, second)`,
        `  flow ${flowId} is not started yet: flowc flow start ${contextId} ${flowId} starts it`,
        `  flow ${flowId} started`,
      ]);
      expect(lines.slice(3, 7)).toEqual([
        `  [0/2] → first started (runner ${runnerId}, attempt 1)`,
        "  [1/2] ✓ first finished  n=1",
        `  [1/2] → second started (runner ${runnerId}, attempt 1)`,
        "  [2/2] ✓ second finished  n=2",
      ]);
      expect(lines.slice(7).join("\n")).toMatch(
        new RegExp(`^flow ${flowId} finished( in .*)?\\nresult:\\n {2}first {3}n=1\\n {2}second {2}n=2$`),
      );
    } finally {
      await watch.kill();
    }
  });

  it("tells a failed attempt's retry, the job's final error with its stderr, and the job never run (exit 1)", async () => {
    const flowId = await submit({
      jobs: [
        sh("flaky", 'echo "flaky says no" >&2; exit 4', { retries: 1 }),
        sh("after", 'echo "x=1" > "$RESULT_FILE"', { depends: ["flaky"] }),
      ],
      timeouts: { retry_base_ms: 100, retry_cap_ms: 100 },
    });
    const watch = flowcProcess("flow", "watch", String(contextId), String(flowId));
    try {
      // Started once the watch is on: the retry is seen as it happens, not read from the end state.
      await watch.waitForLine(/is not started yet/);
      await fixture.admin().client.startFlow(contextId, flowId);
      expect((await watch.exited).code, watch.output()).toBe(1);
      await watch.waitForLine(/^ {2}after {2}dependency flaky failed$/);
      const out = watch.stdout();
      expect(out).toMatch(
        new RegExp(
          `^ {2}\\[0/2\\] ↻ flaky attempt 1 failed on runner ${runnerId}: exit code 4; it will be retried`,
          "m",
        ),
      );
      expect(out).toMatch(/^ {2}\[\d\/2\] ✗ flaky failed \(attempt 2\): exit code 4\n\s+stderr \| flaky says no$/m);
      expect(out).toMatch(/^ {2}\[2\/2\] – after not run: dependency flaky failed$/m);
      expect(out).toMatch(/^not run:\n {2}after {2}dependency flaky failed$/m);
      expect(out).toMatch(
        new RegExp(`^flow ${flowId} failed.*: job flaky failed: exit code 4\\n {2}stderr \\| flaky says no$`, "m"),
      );
      expect(linesOf(watch, /✗ flaky failed/)).toHaveLength(1);
    } finally {
      await watch.kill();
    }
  });

  it("reconnects when the Worker restarts under it, resuming where it left off: nothing lost, nothing twice", async () => {
    const gate = path.join(fixture.stack().dir, "gate");
    const flowId = await submit(
      { jobs: [sh("gated", `while [ ! -f '${gate}' ]; do sleep 0.1; done; echo "done=yes" > "$RESULT_FILE"`)] },
      true,
    );
    const watch = flowcProcess("flow", "watch", String(contextId), String(flowId));
    try {
      await watch.waitForLine(/→ gated started/);
      await fixture.stack().restartWorker();
      await watch.waitForLine(/^flowc: the event stream dropped \(.*\); reconnecting$/);
      await watch.waitForLine(/^flowc: reconnected; resuming after event \d+$/, 60_000);
      writeFileSync(gate, "");
      expect((await watch.exited).code, watch.output()).toBe(0);
      await watch.waitForLine(/^ {2}gated +done=yes$/);
      expect(linesOf(watch, /→ gated started/)).toHaveLength(1);
      expect(linesOf(watch, /✓ gated finished/)).toEqual(["  [1/1] ✓ gated finished  done=yes"]);
    } finally {
      await watch.kill();
    }
  });
});

describe("flowc context watch", () => {
  it("prints every flow's events of the context live, resumes with --since, and ends on Ctrl-C with exit 0", async () => {
    const admin = fixture.admin().client;
    const context = (await admin.createContext()).id;
    // No runner serves script type v here: the flow waits until it is cancelled.
    const body: FlowSubmissionInput = { jobs: [{ name: "idle", script_type: "v", script: "x" }] };
    const watch = startFlowc(["context", "watch", String(context), "--since", "0"], env);
    try {
      const first = (await admin.submitFlow(context, body)).id;
      await watch.waitForLine(new RegExp(`^\\[1\\] \\S+Z flow ${first} created {2}\\(0/1 jobs ended\\)$`));
      // Connected (it printed what it replayed): what follows arrives live.
      await admin.startFlow(context, first);
      await admin.cancelFlow(context, first, "enough");
      await watch.waitForLine(new RegExp(`^\\[3\\] \\S+Z flow ${first} cancelled: enough {2}\\(1/1 jobs ended\\)$`));
      const second = (await admin.submitFlow(context, body)).id;
      await watch.waitForLine(new RegExp(`^\\[4\\] \\S+Z flow ${second} created`));
      expect(watch.stdout()).toMatch(new RegExp(`^\\[2\\] \\S+Z flow ${first} started  \\(0/1 jobs ended\\)$`, "m"));
      watch.child.kill("SIGINT");
      expect(await watch.exited).toEqual({ code: 0, signal: null });
      await watch.waitForLine(/stopped watching/);
      expect(watch.stderr().trimEnd().split("\n")).toEqual([
        `flowc: watching context ${context} after event 0; Ctrl-C stops`,
        `flowc: stopped watching context ${context} (flowc context watch ${context} --since 4 goes on from here)`,
      ]);
    } finally {
      await watch.kill();
    }

    const json = startFlowc(["context", "watch", String(context), "--since", "1", "--json"], env);
    try {
      await json.waitForLine(/"seq":4/);
      json.child.kill("SIGINT");
      expect((await json.exited).code).toBe(0);
      const events = json
        .stdout()
        .trimEnd()
        .split("\n")
        .map((l) => JSON.parse(l) as ContextStreamEvent);
      expect(events.map((e) => [e.seq, e.type])).toEqual([
        [2, "flow.started"],
        [3, "flow.cancelled"],
        [4, "flow.created"],
      ]);
      expect(events.every((e) => e.context_id === context)).toBe(true);
    } finally {
      await json.kill();
    }
  });

  it("shows only the flows its --name, --label and --status let through, and a flow's priority when it was created", async () => {
    const admin = fixture.admin().client;
    const context = (await admin.createContext()).id;
    const job = { name: "idle", script_type: "v" as const, script: "x" };
    // Created before the watch: its labels are read from its view.
    const early = (await admin.submitFlow(context, { name: "nightly eu", labels: { env: "prod" }, jobs: [job] })).id;
    const watch = startFlowc(
      ["context", "watch", String(context), "--name", "NIGHTLY", "--label", "env=prod", "--status", "cancelled"],
      env,
    );
    try {
      await watch.waitForLine(/watching context .* \(only the flows the filters let through\)/);
      const other = (await admin.submitFlow(context, { name: "nightly us", labels: { env: "dev" }, jobs: [job] })).id;
      const late = (
        await admin.submitFlow(context, { name: "nightly", labels: { env: "prod" }, priority: 5, jobs: [job] })
      ).id;
      for (const id of [other, late, early]) await admin.cancelFlow(context, id, "enough");
      await watch.waitForLine(new RegExp(`flow ${early} \\(nightly eu\\) cancelled: enough`));
      watch.child.kill("SIGINT");
      expect((await watch.exited).code).toBe(0);
      const lines = watch.stdout().trimEnd().split("\n");
      expect(lines.map((l) => l.replace(/^\[\d+\] \S+Z /, ""))).toEqual([
        `flow ${late} (nightly) cancelled: enough  (1/1 jobs ended)`,
        `flow ${early} (nightly eu) cancelled: enough  (1/1 jobs ended)`,
      ]);
    } finally {
      await watch.kill();
    }
    const all = startFlowc(
      ["context", "watch", String(context), "--since", "0", "--name", "nightly", "--status", "created"],
      env,
    );
    try {
      await all.waitForLine(/priority 5/);
      all.child.kill("SIGINT");
      expect(all.stdout()).toMatch(new RegExp(`flow \\d+ \\(nightly\\) created \\(priority 5; env=prod\\)`));
    } finally {
      await all.kill();
    }
  });

  it("refuses an actor who may not read the context (the coordinator's 403, exit 1), and a bad --since (exit 2)", async () => {
    expectOneErrorLine(
      await flowc(["context", "watch", String(contextId), "--since", "soon"], env),
      2,
      /^flowc: --since must be an integer of at least 0, not "soon" \(see flowc context watch --help\)$/,
    );
    const other = await fixture.stack().newActor();
    const keyFile = path.join(fixture.stack().dir, "other-key.json");
    writeFileSync(keyFile, JSON.stringify(other.jwk), { mode: 0o600 });
    const watch = startFlowc(["context", "watch", String(contextId)], {
      ...env,
      FLOWC_KEY_FILE: keyFile,
      FLOWC_ACTOR_ID: String(other.id),
    });
    expect((await watch.exited).code).toBe(1);
    await watch.waitForLine(/^flowc: 403 /);
    expect(watch.stdout()).toBe("");
  });
});
