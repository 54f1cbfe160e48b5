import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { DEFAULT_REST_OPTIONS, startRestServer, type RestServer } from "../../infra/redis-rest/index.js";
import { freePort, startRedisServer } from "../../infra/redis-server.js";
import { startWranglerDev } from "../../infra/wrangler.js";
import { actorKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { connectRedis, type Redis } from "../../shared/store/index.js";
import { spawnRunner, type RunnerProcess } from "./runner-process.js";

const root = path.resolve(import.meta.dirname, "../..");
/** Terminal colour codes, taken out of the Worker's output. */
const ANSI = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g");

/** A test runner (test/support/test-runner.ts) started as a process. */
export interface TestRunnerProcess {
  port: number;
  child: ChildProcess;
  /** Everything it printed on stdout so far. */
  output(): string;
  /** Resolves with the first stdout line matching `pattern` (printed already or to come). */
  waitForLine(pattern: RegExp, timeoutMs?: number): Promise<string>;
}

/** A runner registered in a context, with its key and (push) address; `start` runs its process. */
export interface RegisteredRunner<P> {
  id: number;
  jwk: PrivateJwk;
  port: number;
  start(): Promise<P>;
}

/**
 * A stack of a test file's own: redis-server on a free port, the REST endpoint, and the Worker
 * under `wrangler dev`. Tests that count Redis commands need one, since the shared test Redis
 * serves every other file at the same time; so do tests that stop the storage or kill runners.
 */
export async function startPrivateStack(label: string) {
  const dir = mkdtempSync(path.join(tmpdir(), `fc-${label}-`));
  const redisServer = await startRedisServer({ port: await freePort(), dir: path.join(dir, "redis") });
  const token = "private-stack-token";
  const restOptions = { ...DEFAULT_REST_OPTIONS, redisUrl: redisServer.url, port: 0, token };
  let rest: RestServer | undefined = await startRestServer(restOptions);
  const restUrl = rest.url;
  const restPort = Number(new URL(restUrl).port);
  let redisPaused = false;
  /** While storage is refused: the stand-in answering on the REST port, and what it was asked. */
  let refusing: { server: http.Server; bodies: string[] } | undefined;
  const envFile = path.join(dir, "worker.env");
  writeFileSync(envFile, `UPSTASH_REDIS_REST_URL=${restUrl}\nUPSTASH_REDIS_REST_TOKEN=${token}\nCOORDINATOR_SIGNING_KEY='${JSON.stringify(await generateKeyPair())}'\n`);
  let workerLog = "";
  const worker = await startWranglerDev({
    port: await freePort(),
    envFile,
    cwd: root,
    vars: { ALLOW_INSECURE_HTTP: "true", KEY_PREFIX: "" },
    onLine: (line) => (workerLog = `${workerLog}${line.replace(ANSI, "")}\n`.slice(-200_000)),
  });
  const redis: Redis = connectRedis({ url: restUrl, token });
  const children: ChildProcess[] = [];
  const references: RunnerProcess[] = [];
  const anonymous = new CoordinatorClient({ baseUrl: worker.url });

  const keyFileOf = (contextId: number, runnerId: number, jwk: PrivateJwk) => {
    const keyFile = path.join(dir, `runner-${contextId}-${runnerId}.json`);
    writeFileSync(keyFile, JSON.stringify(jwk), { mode: 0o600 });
    return keyFile;
  };

  /** Starts test/support/test-runner.ts as a process; resolves once it listens. */
  function spawnTestRunner(contextId: number, runnerId: number, jwk: PrivateJwk, extra: Record<string, string> = {}): Promise<TestRunnerProcess> {
    const child = spawn(process.execPath, ["--import", "tsx", "test/support/test-runner.ts"], {
      cwd: root,
      env: { ...process.env, COORDINATOR_URL: worker.url, CONTEXT_ID: String(contextId), RUNNER_ID: String(runnerId), KEY_FILE: keyFileOf(contextId, runnerId, jwk), PORT: "0", ...extra },
      stdio: ["ignore", "pipe", "inherit"],
    });
    children.push(child);
    let out = "";
    const watchers = new Set<() => void>();
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      watchers.forEach((w) => w());
    });
    const waitForLine = (pattern: RegExp, timeoutMs = 30_000) =>
      new Promise<string>((resolve, reject) => {
        const check = () => {
          const line = out.split("\n").find((l) => pattern.test(l));
          if (line !== undefined) {
            done();
            resolve(line);
          }
        };
        const onExit = (code: number | null) => {
          done();
          reject(new Error(`test runner exited with ${code} before printing ${pattern}:\n${out}`));
        };
        const timer = setTimeout(() => {
          done();
          reject(new Error(`test runner did not print ${pattern} within ${timeoutMs} ms:\n${out}`));
        }, timeoutMs);
        const done = () => {
          clearTimeout(timer);
          watchers.delete(check);
          child.off("exit", onExit);
        };
        child.once("exit", onExit);
        watchers.add(check);
        check();
      });
    return waitForLine(/^listening \d+/).then((line) => ({ port: Number(line.split(" ")[1]), child, output: () => out, waitForLine }));
  }

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
      return (await spawnTestRunner(contextId, runnerId, jwk, extra)).port;
    },
    spawnTestRunner,
    /**
     * Registers a push runner of sh jobs at a free port, to be served by a test runner (with the
     * env switches of `extra`) once `start` is called: until then deliveries to it fail.
     */
    async registerTestRunner(admin: CoordinatorClient, contextId: number, extra: Record<string, string> = {}, concurrency = 200): Promise<RegisteredRunner<TestRunnerProcess>> {
      const jwk = await generateKeyPair();
      const port = await freePort();
      const runner = await admin.createRunner(contextId, { pubkey: jwk.x, runner_type: "sh", address: `http://127.0.0.1:${port}/`, concurrency });
      return { id: runner.id, jwk, port, start: () => spawnTestRunner(contextId, runner.id, jwk, { ...extra, PORT: String(port) }) };
    },
    /**
     * Registers a reference runner (runner/) of sh and python jobs, push at a free port or pull
     * (`local`), started as a process by `start` with the extra command line `args`.
     */
    async registerReferenceRunner(admin: CoordinatorClient, contextId: number, mode: "push" | "pull", args: string[] = []): Promise<RegisteredRunner<RunnerProcess>> {
      const jwk = await generateKeyPair();
      const port = mode === "push" ? await freePort() : 0;
      const runner = await admin.createRunner(contextId, {
        pubkey: jwk.x,
        runner_type: "sh",
        script_types: ["sh", "python"],
        concurrency: 4,
        ...(mode === "push" ? { address: `http://127.0.0.1:${port}/` } : { local: true }),
      });
      const start = async () => {
        const keyFile = keyFileOf(contextId, runner.id, jwk);
        const common = ["--url", worker.url, "--context", String(contextId), "--runner", String(runner.id), "--key-file", keyFile, "--work-dir", path.join(dir, `work-${contextId}-${runner.id}`)];
        const proc = spawnRunner(root, [...common, ...(mode === "push" ? ["--listen", `127.0.0.1:${port}`] : ["--pull"]), ...args]);
        references.push(proc);
        await proc.waitForLine(mode === "push" ? /listening on http:\/\/127\.0\.0\.1:\d+\// : /pulling from /, 30_000);
        return proc;
      };
      return { id: runner.id, jwk, port, start };
    },
    /** What the Worker (wrangler dev, workerd) printed lately: its console.log / warn / error lines. */
    workerLog: () => workerLog,
    /** Stops the REST endpoint in front of Redis: the Worker's storage is unreachable. */
    async stopRest(): Promise<void> {
      const running = rest;
      rest = undefined;
      await running?.close();
    },
    /**
     * Stops the REST endpoint and answers on its port as it does when Redis is down (503,
     * `ERR Redis is unavailable`), keeping each request's body: `storageRequests` shows what the
     * Worker tried to do meanwhile.
     */
    async refuseStorage(): Promise<void> {
      const running = rest;
      rest = undefined;
      await running?.close();
      const bodies: string[] = [];
      const server = http.createServer((req, res) => {
        let body = "";
        req.on("data", (chunk: Buffer) => (body += chunk.toString()));
        req.on("end", () => {
          bodies.push(body);
          res.writeHead(503, { "content-type": "application/json" }).end(JSON.stringify({ error: "ERR Redis is unavailable: refused by the test" }));
        });
      });
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(restPort, "127.0.0.1", resolve);
      });
      refusing = { server, bodies };
    },
    storageRequests: (): string[] => refusing?.bodies ?? [],
    /** Starts the REST endpoint again (after `stopRest` or `refuseStorage`), on the port the Worker knows. */
    async restartRest(): Promise<void> {
      if (refusing) {
        const { server } = refusing;
        refusing = undefined;
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
      }
      rest ??= await startRestServer({ ...restOptions, port: restPort });
    },
    /** Freezes redis-server (SIGSTOP): connections stay open, nothing answers. */
    pauseRedis(): void {
      process.kill(redisServer.child.pid as number, "SIGSTOP");
      redisPaused = true;
    },
    /** Lets a frozen redis-server go on (SIGCONT). */
    continueRedis(): void {
      process.kill(redisServer.child.pid as number, "SIGCONT");
      redisPaused = false;
    },
    /** Fires the cron trigger once (`wrangler dev --test-scheduled`); resolves with its answer. */
    async sweep(): Promise<{ status: number; text: string }> {
      const res = await fetch(`${worker.url}/__scheduled?cron=*+*+*+*+*`);
      return { status: res.status, text: await res.text() };
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
      if (redisPaused) process.kill(redisServer.child.pid as number, "SIGCONT");
      for (const child of children) child.kill("SIGTERM");
      await Promise.all(references.map((r) => r.kill()));
      await worker.stop();
      refusing?.server.close();
      refusing?.server.closeAllConnections();
      await rest?.close();
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

/**
 * The test runner's `answered …` lines starting with `prefix`, once there are `count` of them. A
 * flow can read as ended before the runner has logged the last answers (their responses are still
 * on the way back), so tests wait for the lines instead of reading the output once.
 */
export function answersIn(proc: { output(): string }, prefix: string, count: number, timeoutMs = 10_000): Promise<string[]> {
  return eventually(async () => {
    const lines = proc.output().split("\n").filter((l) => l.startsWith(prefix));
    return lines.length >= count ? lines : undefined;
  }, timeoutMs);
}

/** Waits for a flow to end (finished or error) and returns its view. */
export function flowEnd(client: CoordinatorClient, contextId: number, flowId: number, timeoutMs = 60_000): Promise<FlowView> {
  return eventually(async () => {
    const view = (await client.request("GET", `/v1/contexts/${contextId}/flows/${flowId}`)) as FlowView;
    return view.status === "finished" || view.status === "error" ? view : undefined;
  }, timeoutMs, 150);
}

/** One attempt a runner began: of job `job` (its name) of flow `flow`. */
export interface Run {
  flow: number;
  job: string;
  attempt: number;
}

/**
 * The attempts runners began, from what they printed: a test runner's `ran <job> flow <f>
 * attempt <n>` and the reference runner's `job <id> (<job>, flow <f>, attempt <n>, <type>) start`.
 */
export function runsIn(...outputs: string[]): Run[] {
  const runs: Run[] = [];
  for (const line of outputs.join("\n").split("\n")) {
    const m = /^ran (\S+) flow (\d+) attempt (\d+)/.exec(line) ?? /job \d+ \(([^,]+), flow (\d+), attempt (\d+), \w+\) start$/.exec(line);
    if (m) runs.push({ job: m[1] as string, flow: Number(m[2]), attempt: Number(m[3]) });
  }
  return runs;
}

/** The attempts begun per job of one flow, by job name, in the order they began. */
export function attemptsOf(runs: Run[], flowId: number): Record<string, number[]> {
  const byJob: Record<string, number[]> = {};
  for (const run of runs) if (run.flow === flowId) (byJob[run.job] ??= []).push(run.attempt);
  return byJob;
}
