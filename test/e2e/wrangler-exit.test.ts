import { spawn } from "node:child_process";
import { rmSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { eventually } from "../support/eventually.js";

// A wrangler dev started by a process that then dies without stopping it (an uncaught error,
// `process.exit`) goes down with it: left running, every such stack held its ports, its
// workerd and its CPU on the developer's machine until killed by hand.

const root = path.resolve(import.meta.dirname, "../..");

/**
 * Starts wrangler dev with everything in one temporary folder (its storage too: nothing stops
 * it to remove a folder of its own), prints the folder and its pid, then throws.
 */
const SCRIPT = `
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { freePort } from "./infra/redis-server.ts";
import { startWranglerDev } from "./infra/wrangler.ts";
const dir = mkdtempSync(path.join(tmpdir(), "fc-wrangler-exit-"));
const envFile = path.join(dir, "worker.env");
writeFileSync(envFile, "UPSTASH_REDIS_REST_URL=http://127.0.0.1:9\\nUPSTASH_REDIS_REST_TOKEN=none\\n");
console.log("dir " + dir);
const worker = await startWranglerDev({ port: await freePort(), envFile, cwd: process.cwd(), persistTo: path.join(dir, "state") });
console.log("pid " + worker.child.pid);
throw new Error("the starter dies without stopping it");
`;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe("a wrangler dev whose starter dies", () => {
  it("is killed with its whole group when the process that started it exits without stopping it", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", SCRIPT], {
      cwd: root,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (out += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    const dir = /^dir (.+)$/m.exec(out)?.[1];
    try {
      const pid = Number(/^pid (\d+)$/m.exec(out)?.[1]);
      expect(pid, out).toBeGreaterThan(0);
      expect(code).not.toBe(0);
      expect(out).toContain("the starter dies without stopping it");
      await eventually(async () => (alive(pid) ? undefined : true), 10_000, 100, `wrangler dev (pid ${pid}) gone`);
    } finally {
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
