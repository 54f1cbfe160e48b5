import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import { startNatsServer, type NatsServerProcess } from "../../infra/nats-server.js";
import { freePort } from "../../infra/redis-server.js";
import {
  actorKeyId,
  generateKeyPair,
  importPrivateKey,
  runnerKeyId,
  signRequest,
  type PrivateJwk,
} from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import { startFlowc } from "./flowc.js";
import { spawnRunner, writeKeyFile, type RunnerProcess } from "./runner-process.js";
import { startTestWorker, type TestWorker } from "./test-worker.js";

/** A nats-server with JetStream of a test file's own, on a free port, its store in a temporary folder. */
export async function startPrivateNats(): Promise<
  NatsServerProcess & { restart(): Promise<void>; crash(): Promise<void>; close(): Promise<void> }
> {
  const dir = mkdtempSync(path.join(tmpdir(), "fleet-nats-"));
  const port = await freePort();
  let server = await startNatsServer({ port, dir });
  return {
    get url() {
      return server.url;
    },
    port,
    get child() {
      return server.child;
    },
    stop: () => server.stop(),
    kill: () => server.kill(),
    /** Stops it (SIGTERM) and starts it again on the same port and store. */
    async restart() {
      await server.stop();
      server = await startNatsServer({ port, dir });
    },
    /**
     * Kills it (SIGKILL) and starts it again on the same port and store: what it had not
     * written yet is lost. nats-server 2.9 then comes back with the workers' consumer's ack
     * floor past messages the work stream still holds (their removals were not written).
     */
    async crash() {
      await server.kill();
      server = await startNatsServer({ port, dir });
    },
    async close() {
      await server.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A registered runner backed by a fleet: start its gateway and workers as processes. */
export interface RegisteredFleet {
  contextId: number;
  runnerId: number;
  jwk: PrivateJwk;
  /** The gateway's push address, as registered. */
  address: string;
  port: number;
  /**
   * Starts the gateway (push, on the registered port, or pulling); resolves once it listens or
   * pulls. `--mode combined` in `args` makes it a worker too.
   */
  gateway(args?: string[]): Promise<RunnerProcess>;
  /** Starts a worker; resolves with it and its operations URL once it takes jobs. */
  worker(args?: string[]): Promise<{ proc: RunnerProcess; ops: string; workDir: string }>;
  /** A signed `POST /admin/drain` to `opsUrl` naming its member (from `/info`), with the runner's key (or `jwk`). */
  drain(opsUrl: string, jwk?: PrivateJwk, member?: string): Promise<Response>;
  /**
   * Starts a member as a user does, `flowc runner start <context> <runner> --key-file … --nats …`
   * and `args` (its `--mode` and the rest), against the coordinator; flowc runs the runner as its
   * child and exits with its code.
   */
  flowcStart(args: string[]): RunnerProcess;
}

/**
 * Registers a push runner for a fleet in a fresh context (its address: the gateway's port) and
 * returns how to start its gateway and workers against `natsUrl`. Every process started is
 * pushed to `started` for the caller's cleanup.
 */
export async function registerFleet(admin: CoordinatorClient, options: FleetRegistration): Promise<RegisteredFleet> {
  const { id: contextId } = await admin.createContext();
  const jwk = await generateKeyPair();
  const port = await freePort();
  const address = `http://127.0.0.1:${port}/`;
  const scriptTypes = options.scriptTypes ?? ["sh", "python"];
  const runner = await admin.createRunner(contextId, {
    pubkey: jwk.x,
    runner_type: "sh",
    script_types: scriptTypes,
    concurrency: options.concurrency,
    ...(options.pull ? { local: true } : { address }),
  });
  return new FleetProcesses(options, { contextId, runnerId: runner.id, jwk, address, port, scriptTypes });
}

/** How registerFleet registers the runner and where its processes go. */
interface FleetRegistration {
  url: string;
  natsUrl: () => string;
  dir: string;
  concurrency: number;
  scriptTypes?: ("sh" | "python" | "v")[];
  /** Registered to pull (its gateway leases jobs) instead of being pushed to. */
  pull?: boolean;
  started: RunnerProcess[];
}

/** A registered fleet runner whose gateway and workers are started as processes of the reference runner. */
class FleetProcesses implements RegisteredFleet {
  readonly contextId: number;
  readonly runnerId: number;
  readonly jwk: PrivateJwk;
  readonly address: string;
  readonly port: number;
  private readonly scriptTypes: string[];
  private readonly keyFile: string;
  private readonly common: string[];
  private workers = 0;

  constructor(
    private readonly options: FleetRegistration,
    runner: Omit<RegisteredFleet, "gateway" | "worker" | "drain" | "flowcStart"> & { scriptTypes: string[] },
  ) {
    this.contextId = runner.contextId;
    this.runnerId = runner.runnerId;
    this.jwk = runner.jwk;
    this.address = runner.address;
    this.port = runner.port;
    this.scriptTypes = runner.scriptTypes;
    this.keyFile = writeKeyFile(options.dir, this.contextId, this.runnerId, this.jwk);
    this.common = ["--context", String(this.contextId), "--runner", String(this.runnerId), "--key-file", this.keyFile];
  }

  async gateway(args: string[] = []): Promise<RunnerProcess> {
    const { options } = this;
    const proc = spawnRunner([
      ...this.common,
      ...["--url", options.url, "--mode", "gateway", "--nats", options.natsUrl()],
      ...(options.pull ? ["--pull"] : ["--listen", `127.0.0.1:${this.port}`]),
      ...["--script-types", this.scriptTypes.join(","), ...args],
    ]);
    options.started.push(proc);
    await proc.waitForLine(options.pull ? /fleet gateway .* pulling from / : /fleet gateway .* listening on /, 30_000);
    return proc;
  }

  async worker(args: string[] = []): Promise<{ proc: RunnerProcess; ops: string; workDir: string }> {
    const { options } = this;
    const workDir = path.join(options.dir, `work-${this.contextId}-${this.runnerId}-${++this.workers}`);
    const proc = spawnRunner([
      ...this.common,
      ...["--mode", "worker", "--nats", options.natsUrl(), "--work-dir", workDir, ...args],
    ]);
    options.started.push(proc);
    const line = await proc.waitForLine(/operations on http:\/\/\S+/, 30_000);
    await proc.waitForLine(/fleet worker \S+ .* taking jobs/, 30_000);
    return { proc, ops: (/operations on (http:\/\/\S+)/.exec(line) as RegExpExecArray)[1] as string, workDir };
  }

  flowcStart(args: string[]): RunnerProcess {
    const { contextId, runnerId, keyFile, options } = this;
    const cli = ["runner", "start", String(contextId), String(runnerId), "--key-file", keyFile];
    const proc = startFlowc([...cli, "--nats", options.natsUrl(), ...args], {
      HOME: options.dir,
      FLOWC_URL: options.url,
    });
    options.started.push(proc);
    return proc;
  }

  async drain(opsUrl: string, key = this.jwk, named?: string): Promise<Response> {
    const member = named ?? ((await (await fetch(new URL("info", opsUrl))).json()) as { member: string }).member;
    const request = new Request(new URL("admin/drain", opsUrl), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ member }),
    });
    const keyid = runnerKeyId(this.contextId, this.runnerId);
    return fetch(await signRequest(request, { keyid, key: await importPrivateKey(key) }));
  }
}

/**
 * `n` independent sh jobs (`j0`…) that append `<job> <worker's work dir>` to `log` when they
 * start, sleep `seconds`, and report `n=<i>`: a fleet's runs are counted from the log.
 */
export function loggedJobs(
  n: number,
  log: string,
  seconds: number,
  retries = 0,
): FlowSubmissionInput & { start: true } {
  return {
    start: true,
    env_vars: { RUN_LOG: log },
    jobs: Array.from({ length: n }, (_, i) => ({
      name: `j${i}`,
      script_type: "sh" as const,
      retries,
      script: `echo "j${i} $(dirname "$PWD")" >> "$RUN_LOG"\nsleep ${seconds}\necho "n=${i}" > "$RESULT_FILE"\n`,
    })),
  };
}

/** The runs in a log of loggedJobs: by job, the work dir of the worker of each run. */
export function runsIn(log: string): Map<string, string[]> {
  const byJob = new Map<string, string[]>();
  let text: string;
  try {
    text = readFileSync(log, "utf8");
  } catch {
    return byJob;
  }
  for (const line of text.split("\n").filter(Boolean)) {
    const [job, dir] = line.split(" ") as [string, string];
    byJob.set(job, [...(byJob.get(job) ?? []), dir]);
  }
  return byJob;
}

/** What a fleet test file works with, set up once for the file (see useFleetStack). */
export interface FleetStack {
  /** A temporary folder for keys, work dirs and run logs. */
  tmp: string;
  admin(): CoordinatorClient;
  nats(): Awaited<ReturnType<typeof startPrivateNats>>;
  /** A fresh context with a runner registered for a fleet, to start its gateway and workers. */
  fleetIn(
    concurrency: number,
    options?: { scriptTypes?: ("sh" | "python" | "v")[]; pull?: boolean },
  ): Promise<RegisteredFleet>;
}

/**
 * A test file's fleet stack: its own `wrangler dev` coordinator (under a fresh key prefix named
 * `label`), its own nats-server, an admin actor; and, after the file, every process it started
 * killed and everything removed.
 */
export function useFleetStack(label: string): FleetStack {
  const tmp = mkdtempSync(path.join(tmpdir(), `${label}-`));
  const started: RunnerProcess[] = [];
  let worker: TestWorker | undefined;
  let admin: CoordinatorClient | undefined;
  let nats: Awaited<ReturnType<typeof startPrivateNats>> | undefined;
  beforeAll(async () => {
    [worker, nats] = await Promise.all([startTestWorker(label, tmp), startPrivateNats()]);
    const jwk = await generateKeyPair();
    const anonymous = new CoordinatorClient({ baseUrl: worker.url });
    const { id } = await anonymous.registerActor(jwk);
    admin = anonymous.as(await signerFromJwk(jwk, actorKeyId(id)));
  });
  afterAll(async () => {
    await Promise.all(started.map((p) => p.kill()));
    await Promise.all([worker?.stop(), nats?.close()]);
    rmSync(tmp, { recursive: true, force: true });
  });
  const need = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error("the fleet stack is not started (use it inside tests)");
    return value;
  };
  return {
    tmp,
    admin: () => need(admin),
    nats: () => need(nats),
    fleetIn: (concurrency, options = {}) =>
      registerFleet(need(admin), {
        url: need(worker).url,
        natsUrl: () => need(nats).url,
        dir: tmp,
        concurrency,
        ...options,
        started,
      }),
  };
}
