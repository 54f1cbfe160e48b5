import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { answersPing } from "../../infra/redis-server.js";
import { cleanEnv, flowc } from "../support/flowc.js";
import { refusesConnections } from "../support/http.js";
import { runToEnd, watchProcess } from "../support/process.js";

/**
 * `npm start`, as the README has it and as CI runs it: the demo brings up its own stack, drives
 * the CLI through both example flows, stops everything and exits 0.
 */

const root = path.resolve(import.meta.dirname, "../..");

/**
 * The end of the demo: the console's page of each of its flows on the demo's own Worker, and the
 * key file to sign in with (the demo actor's private JWK). Returns the Worker's URL, the context
 * and the diamond's flow id, as the output names them.
 */
function expectConsoleLinks(output: string): { url: string; context: string; diamond: string } {
  const url = /^worker {8}(http:\/\/127\.0\.0\.1:\d+) /m.exec(output)?.[1] ?? "(no worker URL)";
  const context = /^context (\d+) created/m.exec(output)?.[1] ?? "?";
  const [diamond = "?", failing = "?", saga = "?", approval = "?", reminder = "?", map = "?"] = [
    ...output.matchAll(/^flow (\d+) submitted/gm),
  ].map((m) => m[1]);
  const pages = `${url}/console/#/contexts/${context}`;
  expect(output).toContain(
    [
      "\nThe console: the demo's flows in a browser",
      `  ${pages}/flows/${diamond}    the diamond`,
      `  ${pages}/flows/${failing}    the failing flow`,
      `  ${pages}/flows/${saga}    the saga`,
      `  ${pages}/flows/${approval}    the approval`,
      `  ${pages}/flows/${reminder}    the reminder`,
      `  ${pages}/flows/${map}    the map`,
      `  ${pages}    every flow of context ${context}, live`,
    ].join("\n"),
  );
  const actor = /^actor (\d+) registered/m.exec(output)?.[1] ?? "?";
  const keyFile = path.join(root, ".dev", "demo", "actor-key.json");
  expect(output).toContain(`  Sign in by importing the demo actor's key file (actor ${actor}): ${keyFile}\n`);
  const jwk = JSON.parse(readFileSync(keyFile, "utf8")) as { kty: string; crv: string; d?: string };
  expect([jwk.kty, jwk.crv, typeof jwk.d]).toEqual(["OKP", "Ed25519", "string"]);
  return { url, context, diamond };
}

describe("npm start", () => {
  it(
    "runs the demo end to end: the diamond's result, the failing flow's error, the inbox, exit 0",
    { timeout: 240_000 },
    async () => {
      // None of the caller's own flowc or runner settings: the demo must not depend on them. Past
      // 220 s it is interrupted as a user would (Ctrl-C), so it still stops what it started.
      const { code, output } = await runToEnd("npm", ["start"], {
        cwd: root,
        env: cleanEnv(),
        timeoutMs: 220_000,
        killSignal: "SIGINT",
      });

      expect(code, output).toBe(0);
      expect(output).toMatch(/^redis-server {2}redis:\/\/127\.0\.0\.1:\d+ /m);
      expect(output).toMatch(/^worker {8}http:\/\/127\.0\.0\.1:\d+ /m);
      expect(output).toMatch(/^\$ flowc flow submit \d+ examples\/diamond\.yaml --start --watch$/m);
      expect(output).toMatch(/^ {2}\[4\/4\] ✓ \w+ finished/m);
      expect(output).toMatch(
        /^flow \d+ finished.*\nresult:\n {2}fetch {3}n=7\n {2}square {2}n=49\n {2}double {2}n=14\n {2}sum {5}total=63\n/m,
      );
      expect(output).toMatch(/^ 3 {2}✓ sum {5}python {2}finished {2}← square, double/m);
      expect(output).toMatch(/^ {2}\[\d\/3\] ✗ verify failed: exit code 3$/m);
      expect(output).toMatch(/^flow \d+ failed.*: job verify failed: exit code 3$/m);
      expect(output).toMatch(/^not run:\n {2}publish {2}dependency verify failed$/m);
      // The saga failed at ship and unwound: the refund, then the booking's cancellation.
      expect(output).toMatch(/^flow \d+ compensated.*: job ship failed: exit code 4$/m);
      expect(output).toMatch(/✓ ↩ charge\.compensate finished {2}refund=RF-PAY-77/);
      expect(output).toMatch(/✓ ↩ book\.compensate finished {2}cancelled=BK-\d+/);
      // The approval waited for its event, which flowc event send gave it; the reminder timed out.
      expect(output).toMatch(
        /^\$ flowc event send \d+ order\.approved --key 1042 --data decision=yes --data by=alice$/m,
      );
      expect(output).toMatch(/matched 1 wait, resumed 1/);
      expect(output).toMatch(/shipped=1042, approved by alice/);
      expect(output).toMatch(/reminded=inv-7 is not paid yet/);
      // The map ran one instance per file, and summed their words.
      expect(output).toMatch(/^ {2}\[\d+\/\d+\] \+ process\[3\] added: item 3 of process$/m);
      expect(output).toMatch(/^ {2}summarize +files=4, words=23$/m);
      expect(output).toMatch(/^ {2}flow \d+ finished\n {4}fetch/m); // the inbox's result message
      expect(output).toContain("What just happened");
      expect(output).not.toMatch(/demo failed/);
      expectConsoleLinks(output);
      expect(output).toMatch(
        /^ {2}\(npm start -- --keep leaves the stack up to open them; this run stops it now\.\)$/m,
      );

      // Everything it started is gone again.
      const redisPort = Number(/^redis-server {2}redis:\/\/127\.0\.0\.1:(\d+)/m.exec(output)?.[1]);
      const workerUrl = /^worker {8}(http:\/\/127\.0\.0\.1:\d+)/m.exec(output)?.[1];
      const runnerUrl = /listening on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(output)?.[1];
      expect(redisPort).toBeGreaterThan(0);
      expect(workerUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(runnerUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
      expect(await answersPing(redisPort)).toBe(false);
      expect(await refusesConnections(`${workerUrl}/health`)).toBe(true);
      expect(await refusesConnections(`${runnerUrl}health`)).toBe(true);
    },
  );
  it(
    "with --keep, leaves the stack up for the console's links until Ctrl-C, then stops it and exits 0",
    { timeout: 240_000 },
    async () => {
      // The demo itself rather than npm, which dies of the Ctrl-C itself whatever its script
      // answers; in its own process group, which Ctrl-C in a terminal signals as a whole.
      const child = spawn(process.execPath, ["--import", "tsx", "infra/demo.ts", "--keep"], {
        cwd: root,
        env: cleanEnv(),
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      });
      const demo = watchProcess(child, "the demo with --keep");
      const interrupt = () => process.kill(-(child.pid as number), "SIGINT");
      try {
        await demo.waitForLine(
          /^The demo's stack stays up \(coordinator http:\/\/127\.0\.0\.1:\d+\) until Ctrl-C\.$/,
          220_000,
        );
        const output = demo.stdout();
        expect(output).toContain("The stack and the runner are still up (--keep).");
        const { url, context, diamond } = expectConsoleLinks(output);
        // Still up: the console's page, and the diamond its link names, read with the demo's profile.
        const page = await fetch(`${url}/console/`);
        expect([page.status, page.headers.get("content-type")]).toEqual([200, expect.stringMatching(/^text\/html/)]);
        await page.body?.cancel();
        const shown = await flowc(["flow", "show", context, diamond], {
          FLOWC_PROFILE: path.join(root, ".dev", "demo", "profile.json"),
        });
        expect(shown.stdout, shown.stderr).toMatch(/^status\s+finished$/m);
        const runnerUrl = /listening on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(output)?.[1];
        expect(await refusesConnections(`${runnerUrl}health`)).toBe(false);

        interrupt();
        expect(await demo.exited).toEqual({ code: 0, signal: null });
        await demo.waitForLine(/^demo: stopped$/);
        expect(await refusesConnections(`${url}/health`)).toBe(true);
        expect(await refusesConnections(`${runnerUrl}health`)).toBe(true);
      } finally {
        // A failure above: stop the demo as a user would, so it stops what it started.
        if (child.exitCode === null && child.signalCode === null) {
          interrupt();
          await demo.exited;
        }
      }
    },
  );
});
