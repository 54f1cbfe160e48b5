import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { DEFAULT_REST_OPTIONS, startRestServer } from "../../infra/redis-rest/index.js";
import { freePort, startRedisServer } from "../../infra/redis-server.js";
import { startWranglerDev } from "../../infra/wrangler.js";
import { actorKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import { connectRedis, type Redis } from "../../shared/store/index.js";

const root = path.resolve(import.meta.dirname, "../..");

/**
 * A stack of a test file's own: redis-server on a free port, the REST endpoint, and the Worker
 * under `wrangler dev`. Tests that count Redis commands need one, since the shared test Redis
 * serves every other file at the same time.
 */
export async function startPrivateStack(label: string) {
  const dir = mkdtempSync(path.join(tmpdir(), `fc-${label}-`));
  const redisServer = await startRedisServer({ port: await freePort(), dir: path.join(dir, "redis") });
  const token = "private-stack-token";
  const rest = await startRestServer({ ...DEFAULT_REST_OPTIONS, redisUrl: redisServer.url, port: 0, token });
  const envFile = path.join(dir, "worker.env");
  writeFileSync(envFile, `UPSTASH_REDIS_REST_URL=${rest.url}\nUPSTASH_REDIS_REST_TOKEN=${token}\nCOORDINATOR_SIGNING_KEY='${JSON.stringify(await generateKeyPair())}'\n`);
  const worker = await startWranglerDev({ port: await freePort(), envFile, cwd: root, vars: { ALLOW_INSECURE_HTTP: "true", KEY_PREFIX: "" } });
  const redis: Redis = connectRedis({ url: rest.url, token });
  const children: ChildProcess[] = [];
  const anonymous = new CoordinatorClient({ baseUrl: worker.url });
  return {
    dir,
    url: worker.url,
    redis,
    anonymous,
    async newActor(): Promise<{ id: number; jwk: PrivateJwk; client: CoordinatorClient }> {
      const jwk = await generateKeyPair();
      const actor = await anonymous.registerActor(jwk);
      return { id: actor.id, jwk, client: anonymous.as(await signerFromJwk(jwk, actorKeyId(actor.id))) };
    },
    /** Starts test/support/test-runner.ts as a process; resolves with its port. */
    async startTestRunner(contextId: number, runnerId: number, jwk: PrivateJwk, extra: Record<string, string> = {}): Promise<number> {
      const keyFile = path.join(dir, `runner-${runnerId}.json`);
      writeFileSync(keyFile, JSON.stringify(jwk));
      const child = spawn(process.execPath, ["--import", "tsx", "test/support/test-runner.ts"], {
        cwd: root,
        env: { ...process.env, COORDINATOR_URL: worker.url, CONTEXT_ID: String(contextId), RUNNER_ID: String(runnerId), KEY_FILE: keyFile, PORT: "0", ...extra },
        stdio: ["ignore", "pipe", "inherit"],
      });
      children.push(child);
      return new Promise((resolve, reject) => {
        child.once("exit", (code) => reject(new Error(`test runner exited with ${code}`)));
        child.stdout?.on("data", (chunk: Buffer) => {
          const match = /listening (\d+)/.exec(chunk.toString());
          if (match) resolve(Number(match[1]));
        });
      });
    },
    /** Redis's own command counts, by command (INFO commandstats), without INFO itself. */
    async commandStats(): Promise<Map<string, number>> {
      const text = await redis.exec<string>(["INFO", "commandstats"]);
      const counts = new Map<string, number>();
      for (const line of text.split("\n")) {
        const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (m && m[1] !== "info") counts.set(m[1] as string, Number(m[2]));
      }
      return counts;
    },
    async stop(): Promise<void> {
      for (const child of children) child.kill("SIGTERM");
      await worker.stop();
      await rest.close();
      await redisServer.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export type PrivateStack = Awaited<ReturnType<typeof startPrivateStack>>;

/** The difference of two command counts, by command, and its total. */
export function commandDelta(before: Map<string, number>, after: Map<string, number>): { total: number; byCommand: Record<string, number> } {
  const byCommand: Record<string, number> = {};
  let total = 0;
  for (const [name, calls] of after) {
    const delta = calls - (before.get(name) ?? 0);
    if (delta > 0) {
      byCommand[name] = delta;
      total += delta;
    }
  }
  return { total, byCommand };
}

/** Polls until `check` returns a value, or fails after `timeoutMs`. */
export async function eventually<T>(check: () => Promise<T | undefined>, timeoutMs: number, intervalMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`not reached within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
