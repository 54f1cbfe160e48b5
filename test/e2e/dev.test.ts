import { spawn } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { answersPing, freePort } from "../../infra/redis-server.js";
import { refusesConnections } from "../support/http.js";
import { runToEnd, watchProcess } from "../support/process.js";

const root = path.resolve(import.meta.dirname, "../..");

describe("npm run dev", () => {
  it("starts redis-server, the REST endpoint and wrangler dev, reports health, and Ctrl-C stops all three", async () => {
    const [redisPort, restPort, workerPort] = [await freePort(), await freePort(), await freePort()];
    const child = spawn("npm", ["run", "-s", "dev"], {
      cwd: root,
      env: {
        ...process.env,
        DEV_REDIS_PORT: String(redisPort),
        REST_PORT: String(restPort),
        WORKER_PORT: String(workerPort),
        REDIS_URL: "",
      },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const dev = watchProcess(child, "npm run dev");
    try {
      await dev.waitForLine(/ready:/, 90_000);
      const output = dev.output();
      expect(output).toContain(`redis-server  redis://127.0.0.1:${redisPort}`);
      expect(output).toContain(`redis-rest    http://127.0.0.1:${restPort}`);
      expect(output).toContain(`worker        http://127.0.0.1:${workerPort}`);
      expect(output).toContain(`console       http://127.0.0.1:${workerPort}/console/`);
      const page = await fetch(`http://127.0.0.1:${workerPort}/console/`);
      expect([page.status, page.headers.get("content-type")]).toEqual([200, "text/html; charset=utf-8"]);

      const health = await fetch(`http://127.0.0.1:${workerPort}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toMatchObject({ status: "ok", redis: { reachable: true } });
    } finally {
      // A terminal's Ctrl-C signals the whole foreground process group.
      if (child.exitCode === null && child.signalCode === null) process.kill(-(child.pid as number), "SIGINT");
      await dev.exited;
    }
    await dev.waitForLine(/stopped/);
    expect(await answersPing(redisPort)).toBe(false);
    expect(await refusesConnections(`http://127.0.0.1:${restPort}`)).toBe(true);
    expect(await refusesConnections(`http://127.0.0.1:${workerPort}/health`)).toBe(true);
  });

  it("names the package to install when redis-server is missing", async () => {
    // Only the project's own Node on the PATH: no redis-server to be found.
    const run = await runToEnd(path.join(root, "node_modules/.bin/node"), ["--import", "tsx", "infra/dev.ts"], {
      cwd: root,
      env: { PATH: path.join(root, "node_modules/.bin"), HOME: process.env.HOME ?? "/tmp" },
    });
    expect(run.code).toBe(1);
    expect(run.output).toMatch(/redis-server is not installed.*apt-get install redis-server/);
  });
});
