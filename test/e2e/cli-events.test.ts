import { writeFileSync } from "node:fs";
import path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../infra/redis-server.js";
import type { EventSent, FlowView } from "../../shared/model/index.js";
import { actorEnv, expectOneErrorLine, flowc, startFlowc, type Run } from "../support/flowc.js";
import { usePrivateStack } from "../support/use-private-stack.js";

/**
 * Flows that react, through the CLI: a wait (its key from the flow's env), a sleep and a `when`
 * that is false, watched by `flowc flow submit --watch`, shown by `flow show` and `flow dag`, the
 * wait ended by `flowc event send` (twice with one id: the second is a duplicate), and a context's
 * `event_lookback` set by `flowc context limits` handing an event sent first to a wait that starts
 * later. Real flowc processes against a private stack; no runner: no job here runs a script.
 */

const fixture = usePrivateStack("cli-events");
let env: Record<string, string> = {};
let contextId = "";

beforeAll(async () => {
  const stack = fixture.stack();
  const admin = fixture.admin();
  env = actorEnv(stack, admin);
  contextId = String((await admin.client.createContext()).id);
});

const run = (...args: string[]) => flowc(args, env);

function ok(result: Run): string {
  expect(result.code, result.stdout + result.stderr).toBe(0);
  return result.stdout;
}

/**
 * An order that waits for its approval (the key is the order's number, from env), ships only
 * when refused (so, approved, `ship` is skipped: it would need a runner), cools down for two
 * seconds meanwhile (long enough to be seen sleeping by a watch that starts), and wraps up with a
 * second's sleep whatever `ship` did.
 */
function orderFlow(order: string): string {
  const file = path.join(fixture.stack().dir, `order-${order}.yaml`);
  writeFileSync(
    file,
    [
      "env_vars:",
      `  ORDER: "${order}"`,
      "jobs:",
      "  - name: approval",
      "    wait:",
      "      event: order.approved",
      '      key: "${ORDER}"',
      "      timeout: 600",
      "  - name: cool_down",
      "    sleep: 2",
      "  - name: ship",
      "    depends: [approval]",
      "    when: 'deps.approval.decision == \"no\"'",
      "    script_type: sh",
      "    script: echo shipping",
      "  - name: wrap_up",
      "    depends: [ship, cool_down]",
      "    needs: all_done",
      "    sleep: 1",
      "",
    ].join("\n"),
  );
  return file;
}

const flowIdOf = (stdout: string) => /^flow (\d+) submitted/m.exec(stdout)?.[1] ?? "";

describe("flowc event send and flows that react", () => {
  it("watches a wait, a sleep and a skip to the flow's end; the event ends the wait once, the same id again is a duplicate", async () => {
    const watch = startFlowc(["flow", "submit", contextId, orderFlow("42"), "--start", "--watch"], env);
    /** `flowc event send` of the approval's event, id appr-42, with `args` after. */
    const sendAppr42 = (...args: string[]) =>
      run("event", "send", contextId, "order.approved", "--key", "42", "--id", "appr-42", ...args);
    try {
      await watch.waitForLine(/⏸ approval waits for event order\.approved with key "42", \d+ min left$/);
      await watch.waitForLine(/☾ cool_down sleeping until \S+Z, [0-2] s left$/);
      const flowId = flowIdOf(watch.stdout());
      expect(Number(flowId)).toBeGreaterThan(0);

      // While it waits: the show and the DAG say what each job is and what the wait waits for.
      const show = ok(await run("flow", "show", contextId, flowId));
      expect(show).toMatch(
        /^approval +\d+ +wait +… waiting .* {2}waiting for event order\.approved with key "42", \d+ min left$/m,
      );
      expect(show).toMatch(/^ship +\d+ +sh +… waiting /m);
      // A wait and a sleep under way are not "running": they hold no runner.
      expect(show).toMatch(
        /^progress +[01] of 4 jobs ended \(.*, 0 running, 1 waiting for an event(, 1 sleeping)?\)$/m,
      );
      const dag = ok(await run("flow", "dag", contextId, flowId));
      expect(dag).toMatch(
        /… approval +wait +waiting .*waiting for event order\.approved with key "42", \d+ min left$/m,
      );
      expect(dag).toMatch(/ wrap_up +sleep +waiting +← ship, cool_down$/m);

      const first = ok(await sendAppr42("--data", "decision=yes", "--data", "by=alice"));
      expect(first).toBe("event appr-42: matched 1 wait, resumed 1\n");
      const again = await sendAppr42("--data-json", '{"decision":"yes","by":"alice"}', "--json");
      expect(JSON.parse(ok(again)) as EventSent).toEqual({ id: "appr-42", duplicate: true, matched: 1, resumed: 0 });
      const text = ok(await sendAppr42("--data", "by=alice", "--data", "decision=yes"));
      expect(text).toBe("event appr-42: matched 1 wait, resumed 0 (sent before: duplicate)\n");
      // The same id with other data is another event: refused.
      const other = await sendAppr42("--data", "decision=no");
      expectOneErrorLine(other, 1, /^flowc: 409 .*appr-42/);

      expect(await watch.exited, watch.output()).toEqual({ code: 0, signal: null });
      await watch.waitForLine(/^not run:$/);
      const out = watch.stdout();
      expect(out).toMatch(/^ {2}\[\d\/4\] ✓ approval finished {2}.*event_id=appr-42$/m);
      expect(out).toMatch(/^ {2}\[\d\/4\] ⤼ ship not run: when is false: deps\.approval\.decision == "no"$/m);
      expect(out).toMatch(/^ {2}\[\d\/4\] ☾ wrap_up sleeping until \S+Z, \d s left$/m);
      expect(out).toMatch(/^ {2}\[4\/4\] ✓ wrap_up finished {2}slept_until=/m);
      expect(out).toMatch(new RegExp(`^flow ${flowId} finished( in .*)? \\(1 not run\\)$`, "m"));
      expect(out).toMatch(/^not run:\n {2}ship {2}when is false: deps\.approval\.decision == "no"\n?$/m);
      expect(watch.stderr()).toBe("");

      // Ended: the show and the DAG tell the skip; a watch of the ended flow ends at once, exit 0.
      const after = ok(await run("flow", "show", contextId, flowId));
      expect(after).toMatch(/^progress +4 of 4 jobs ended \(3 finished, 0 failed, 1 not run, 0 running\)$/m);
      expect(after).toMatch(/^ship +\d+ +sh +⤼ not run .* when is false: deps\.approval\.decision == "no"$/m);
      expect(ok(await run("flow", "dag", contextId, flowId))).toMatch(/⤼ ship +sh +not run +← approval$/m);
      const rewatch = ok(await run("flow", "watch", contextId, flowId));
      expect(rewatch).toMatch(/^ {2}\[\d\/4\] ⤼ ship not run: when is false/m);
      expect(rewatch).toMatch(new RegExp(`^flow ${flowId} finished.* \\(1 not run\\)$`, "m"));
      const view = JSON.parse(ok(await run("flow", "show", contextId, flowId, "--json"))) as FlowView;
      expect(view.skipped).toEqual({ ship: 'when is false: deps.approval.decision == "no"' });
    } finally {
      await watch.kill();
    }
  });

  it("keeps events for waits that start later only with context limits --event-lookback", async () => {
    // Not kept by default: an event before the wait starts reaches nothing, and the wait waits on.
    expect(
      ok(await run("event", "send", contextId, "order.approved", "--key", "55", "--data", "decision=yes")),
    ).toMatch(/^event [\w-]+: matched 0 waits, resumed 0\n$/);
    const waiting = ok(await run("flow", "submit", contextId, orderFlow("55"), "--start"));
    const waitingId = flowIdOf(waiting);
    expect(ok(await run("flow", "show", contextId, waitingId))).toMatch(
      /^approval +\d+ +wait +… waiting .* {2}waiting for event order\.approved with key "55"/m,
    );
    await fixture.admin().client.cancelFlow(Number(contextId), Number(waitingId), "not kept");

    const limits = ok(await run("context", "limits", contextId, "--event-lookback", "60"));
    expect(limits).toMatch(/^event lookback +60 s \(events are kept for waits that start later\)$/m);
    expect(
      ok(
        await run(
          "event",
          "send",
          contextId,
          "order.approved",
          "--key",
          "77",
          "--id",
          "early-77",
          "--data",
          "decision=yes",
        ),
      ),
    ).toBe("event early-77: matched 0 waits, resumed 0\n");
    // The wait starts after the event came: it takes it at once, and the flow runs to its end.
    const watched = await run("flow", "submit", contextId, orderFlow("77"), "--start", "--watch");
    const out = ok(watched);
    expect(out).toMatch(/^ {2}\[\d\/4\] ✓ approval finished {2}.*event_id=early-77/m);
    expect(out).toMatch(/⤼ ship not run: when is false/);
    expect(out).toMatch(/^flow \d+ finished.* \(1 not run\)$/m);

    const cleared = ok(await run("context", "limits", contextId, "--event-lookback", "none"));
    expect(cleared).toMatch(/^event lookback +none \(an event reaches only the waits already waiting\)$/m);
    const shown = JSON.parse(ok(await run("context", "show", contextId, "--json"))) as { event_lookback?: number };
    expect(shown.event_lookback).toBeUndefined();
  });

  it("counts skipped jobs as ended (not run) in context watch, each flow with its name", async () => {
    const watch = startFlowc(["context", "watch", contextId, "--since", "0"], env);
    try {
      await watch.waitForLine(/ flow \d+ \(order-\d+\) finished {2}\(4\/4 jobs ended, 1 not run\)$/);
      watch.child.kill("SIGINT");
      expect((await watch.exited).code).toBe(0);
    } finally {
      await watch.kill();
    }
  });

  it("refuses a bad command line before signing anything (exit 2)", async () => {
    const cases: [string[], RegExp][] = [
      [
        ["--data", "decision"],
        /^flowc: --data takes key=value, not "decision" \(no "="\) \(see flowc event send --help\)$/,
      ],
      [["--data", "=yes"], /^flowc: --data "=yes" has no key before "="/],
      [["--data", "a=1", "--data", "a=2"], /^flowc: --data gives "a" twice/],
      [["--data-json", "[1]"], /^flowc: --data-json must be a JSON object of strings/],
      [["--data-json", '{"n":1}'], /^flowc: --data-json's values must be strings \(a result's are\): "n" is a number/],
      [["--data-json", "{"], /^flowc: --data-json is not JSON: /],
      [["--id", "has space"], /^flowc: --id: an event id: letters, digits and _ \. : -, at most 128/],
    ];
    const runs = await Promise.all(cases.map(([args]) => run("event", "send", contextId, "order.approved", ...args)));
    runs.forEach((result, i) => expectOneErrorLine(result, 2, cases[i]?.[1] ?? /never/));
    expectOneErrorLine(await run("event", "send", contextId, "bad name!"), 2, /^flowc: <name>: an event name: /);
    expectOneErrorLine(
      await run("context", "limits", contextId, "--event-lookback", "86401"),
      2,
      /^flowc: --event-lookback is at most 86400 \(a day\), not 86401 \(see flowc context limits --help\)$/,
    );
    expectOneErrorLine(
      await run("context", "limits", contextId, "--event-lookback", "0"),
      2,
      /^flowc: --event-lookback must be an integer of at least 1, not "0"/,
    );
    // No answer (nothing listens there): how to send the same event again is said before the error.
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    const lost = await flowc(["event", "send", contextId, "order.approved", "--id", "lost-1"], {
      ...env,
      FLOWC_URL: nowhere,
    });
    expect(lost.code).toBe(1);
    expect(lost.errors).toEqual([
      "flowc: the answer did not come: send it again with --id lost-1 (the same event, taken once)",
      expect.stringMatching(new RegExp(`^flowc: cannot reach the coordinator at ${nowhere}: ECONNREFUSED`)),
    ]);
    const help = ok(await run("event", "send", "--help"));
    expect(help).toMatch(/^Usage: flowc event send <context> <name> /);
    expect(help).toContain("flowc event send 1 order.approved --key 1042 --data decision=yes");
  });
});
