import { spawn } from "node:child_process";
import { once } from "node:events";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { answersPing, freePort } from "../../infra/redis-server.js";
import { refusesConnections } from "../support/http.js";

const root = path.resolve(import.meta.dirname, "../..");

async function waitFor(predicate: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("npm run dev", () => {
  it("starts redis-server, the REST endpoint and wrangler dev, reports health, and Ctrl-C stops all three", async () => {
    const [redisPort, restPort, workerPort] = [await freePort(), await freePort(), await freePort()];
    const child = spawn("npm", ["run", "-s", "dev"], {
      cwd: root,
      env: { ...process.env, DEV_REDIS_PORT: String(redisPort), REST_PORT: String(restPort), WORKER_PORT: String(workerPort), REDIS_URL: "" },
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    try {
      await waitFor(() => output.includes("ready:") || child.exitCode !== null, 90_000);
    } catch {
      // fall through to the assertion, which shows the output
    }
    expect(output).toContain("ready:");
    expect(output).toContain(`redis-server  redis://127.0.0.1:${redisPort}`);
    expect(output).toContain(`redis-rest    http://127.0.0.1:${restPort}`);
    expect(output).toContain(`worker        http://127.0.0.1:${workerPort}`);

    const health = await fetch(`http://127.0.0.1:${workerPort}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", redis: { reachable: true } });

    // A terminal's Ctrl-C signals the whole foreground process group.
    process.kill(-(child.pid as number), "SIGINT");
    await once(child, "exit");
    expect(output).toContain("stopped");
    expect(await answersPing(redisPort)).toBe(false);
    expect(await refusesConnections(`http://127.0.0.1:${restPort}`)).toBe(true);
    expect(await refusesConnections(`http://127.0.0.1:${workerPort}/health`)).toBe(true);
  });

  it("names the package to install when redis-server is missing", async () => {
    // Only the project's own Node on the PATH: no redis-server to be found.
    const child = spawn(path.join(root, "node_modules/.bin/node"), ["--import", "tsx", "infra/dev.ts"], {
      cwd: root,
      env: { PATH: path.join(root, "node_modules/.bin"), HOME: process.env.HOME ?? "/tmp" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    const [code] = (await once(child, "exit")) as [number];
    expect(code).toBe(1);
    expect(output).toMatch(/redis-server is not installed.*apt-get install redis-server/);
  });
});
