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

/** Where a fleet's processes report and keep their files, and who cleans up after them. */
export interface FleetPlace {
  /** The coordinator's base URL. */
  url: string;
  /** The NATS server's URL (read when a process starts: it may have restarted). */
  natsUrl: () => string;
  /** A temporary folder for key files and work dirs. */
  dir: string;
  /** Every process started is pushed here, for the caller's cleanup. */
  started: RunnerProcess[];
}

/**
 * Registers a push runner for a fleet in a fresh context (its address: the gateway's port) and
 * returns how to start its gateway and workers against `natsUrl`. Every process started is
 * pushed to `started` for the caller's cleanup.
 */
export async function registerFleet(
  admin: CoordinatorClient,
  options: FleetPlace & {
    concurrency: number;
    scriptTypes?: ("sh" | "python" | "v")[];
    /** Registered to pull (its gateway leases jobs) instead of being pushed to. */
    pull?: boolean;
  },
): Promise<RegisteredFleet> {
  const { id: contextId } = await admin.createContext();
  const jwk = await generateKeyPair();
  const port = await freePort();
  const scriptTypes = options.scriptTypes ?? ["sh", "python"];
  const runner = await admin.createRunner(contextId, {
    pubkey: jwk.x,
    runner_type: "sh",
    script_types: scriptTypes,
    concurrency: options.concurrency,
    ...(options.pull ? { local: true } : { address: `http://127.0.0.1:${port}/` }),
  });
  const registered = { contextId, runnerId: runner.id, jwk, port, scriptTypes, pull: options.pull === true };
  return new FleetProcesses(options, registered);
}

/** A registered fleet runner: its ids, key and port, and how it takes work. */
interface FleetRunner {
  contextId: number;
  runnerId: number;
  jwk: PrivateJwk;
  port: number;
  scriptTypes: string[];
  pull: boolean;
}

/** Starts a registered fleet's processes with the runner's key file, and drains them as its owner. */
class FleetProcesses implements RegisteredFleet {
  readonly contextId: number;
  readonly runnerId: number;
  readonly jwk: PrivateJwk;
  readonly port: number;
  readonly address: string;
  private readonly keyFile: string;
  /** What every process of the fleet is started with: its runner and key file. */
  private readonly common: string[];
  private workers = 0;

  constructor(
    private readonly place: FleetPlace,
    private readonly runner: FleetRunner,
  ) {
    ({ contextId: this.contextId, runnerId: this.runnerId, jwk: this.jwk, port: this.port } = runner);
    this.address = `http://127.0.0.1:${runner.port}/`;
    this.keyFile = writeKeyFile(place.dir, runner.contextId, runner.runnerId, runner.jwk);
    const ids = ["--context", String(runner.contextId), "--runner", String(runner.runnerId)];
    this.common = [...ids, "--key-file", this.keyFile];
  }

  async gateway(args: string[] = []): Promise<RunnerProcess> {
    const { place, runner } = this;
    const proc = this.spawn([
      "--url",
      place.url,
      "--mode",
      "gateway",
      ...(runner.pull ? ["--pull"] : ["--listen", `127.0.0.1:${runner.port}`]),
      "--script-types",
      runner.scriptTypes.join(","),
      ...args,
    ]);
    await proc.waitForLine(runner.pull ? /fleet gateway .* pulling from / : /fleet gateway .* listening on /, 30_000);
    return proc;
  }

  async worker(args: string[] = []): Promise<{ proc: RunnerProcess; ops: string; workDir: string }> {
    const workDir = path.join(this.place.dir, `work-${this.contextId}-${this.runnerId}-${++this.workers}`);
    const proc = this.spawn(["--mode", "worker", "--work-dir", workDir, ...args]);
    const line = await proc.waitForLine(/operations on http:\/\/\S+/, 30_000);
    await proc.waitForLine(/fleet worker \S+ .* taking jobs/, 30_000);
    return { proc, ops: (/operations on (http:\/\/\S+)/.exec(line) as RegExpExecArray)[1] as string, workDir };
  }

  async drain(opsUrl: string, key = this.jwk, named?: string): Promise<Response> {
    const member = named ?? ((await (await fetch(new URL("info", opsUrl))).json()) as { member: string }).member;
    const request = new Request(new URL("admin/drain", opsUrl), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ member }),
    });
    const signed = await signRequest(request, {
      keyid: runnerKeyId(this.contextId, this.runnerId),
      key: await importPrivateKey(key),
    });
    return fetch(signed);
  }

  flowcStart(args: string[]): RunnerProcess {
    const { contextId, runnerId, keyFile, place } = this;
    const cli = ["runner", "start", String(contextId), String(runnerId), "--key-file", keyFile];
    const proc = startFlowc([...cli, "--nats", place.natsUrl(), ...args], { HOME: place.dir, FLOWC_URL: place.url });
    place.started.push(proc);
    return proc;
  }

  /** A runner process of this fleet on the NATS server as it is now, handed to the cleanup. */
  private spawn(args: string[]): RunnerProcess {
    const proc = spawnRunner([...this.common, "--nats", this.place.natsUrl(), ...args]);
    this.place.started.push(proc);
    return proc;
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
