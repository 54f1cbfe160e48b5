import path from "node:path";
import { describe, expect, it } from "vitest";
import { answersPing } from "../../infra/redis-server.js";
import { cleanEnv } from "../support/flowc.js";
import { refusesConnections } from "../support/http.js";
import { runToEnd } from "../support/process.js";

/**
 * `npm start`, as the README has it and as CI runs it: the demo brings up its own stack, drives
 * the CLI through both example flows, stops everything and exits 0.
 */

const root = path.resolve(import.meta.dirname, "../..");

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
      expect(output).toMatch(/^ {2}\[\d\/3\] ✗ verify error: exit code 3$/m);
      expect(output).toMatch(/^flow \d+ error.*: job verify failed: exit code 3$/m);
      expect(output).toMatch(/^not run: publish$/m);
      expect(output).toMatch(/^ {2}flow \d+ finished\n {4}fetch/m); // the inbox's result message
      expect(output).toContain("What just happened");
      expect(output).not.toMatch(/demo failed/);

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
});
