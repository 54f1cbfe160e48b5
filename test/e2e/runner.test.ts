import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  actorKeyId,
  generateKeyPair,
  importPrivateKey,
  keyThumbprint,
  parsePrivateJwk,
  signRequest,
  type RequestSigner,
} from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowView, Message, RunnerJob } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { flowEnd as flowEndOf } from "../support/flow-runs.js";
import { registerReferenceRunner, type RunnerProcess } from "../support/runner-process.js";
import { readTestStackConfig } from "../support/stack-config.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * The reference runner as it is deployed: a real runner process (push: an HTTP server the
 * coordinator POSTs signed deliveries to; pull: a lease loop) against a real `wrangler dev`
 * Worker over the test stack's Redis, running real python and sh processes. Each test has a
 * context of its own, so its flows only ever reach its own runner.
 */

const stack = readTestStackConfig();
const tmp = mkdtempSync(path.join(tmpdir(), "flow-runner-test-"));
const runners: RunnerProcess[] = [];
let worker: TestWorker;
let admin: CoordinatorClient;
let actorId: number;

beforeAll(async () => {
  worker = await startTestWorker("runner", tmp);
  const jwk = await generateKeyPair();
  const anonymous = new CoordinatorClient({ baseUrl: worker.url });
  actorId = (await anonymous.registerActor(jwk)).id;
  admin = anonymous.as(await signerFromJwk(jwk, actorKeyId(actorId)));
});

afterAll(async () => {
  await Promise.all(runners.map((r) => r.kill()));
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

interface StartedRunner {
  contextId: number;
  runnerId: number;
  proc: RunnerProcess;
  workDir: string;
  /** The push runner's address ("" for a pull runner). */
  address: string;
}

/** A fresh context with one registered reference runner, started as a process and ready. */
async function startRunnerIn(mode: "push" | "pull", args: string[] = []): Promise<StartedRunner> {
  const { id: contextId } = await admin.createContext();
  const runner = await registerReferenceRunner(admin, contextId, {
    url: worker.url,
    dir: tmp,
    mode,
    args,
    started: runners,
  });
  const proc = await runner.start();
  return { contextId, runnerId: runner.id, proc, workDir: runner.workDir, address: runner.address };
}

async function submitFlow(contextId: number, body: FlowSubmissionInput): Promise<FlowView> {
  return admin.submitFlow(contextId, { start: true, ...body });
}

function jsonPost(url: string, body: unknown): Request {
  return new Request(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** Signs as the coordinator does: its key from the test stack, keyid its kid (the JWK thumbprint). */
async function coordinatorSigner(): Promise<RequestSigner> {
  const jwk = parsePrivateJwk(stack.coordinatorKey, "the coordinator key");
  return { keyid: await keyThumbprint(jwk.x), key: await importPrivateKey(jwk) };
}

/** Whether a process still runs: a zombie (dead, not yet reaped by whoever inherited it) does not. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2)[0] !== "Z";
  } catch {
    if (existsSync("/proc/self/stat")) return false;
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
}

/** Waits for the flow to end (finished or error). */
const flowEnd = (contextId: number, id: number): Promise<FlowView> => flowEndOf(admin, contextId, id);

/**
 * A diamond a → (b, c) → d in both languages. Each job reads what it needs from its
 * dependencies (DEP_<JOB>_<KEY> or FLOW_INPUTS) and the env (the flow's, overridden by its own).
 */
const DIAMOND: FlowSubmissionInput = {
  env_vars: { GREETING: "hello", SHARED: "flow" },
  jobs: [
    {
      name: "a",
      script_type: "python",
      script:
        'import os\nwith open(os.environ["RESULT_FILE"], "w") as f:\n    f.write(f"value={os.environ[\'GREETING\']}-a\\nn=2\\n")\n',
    },
    {
      name: "b",
      script_type: "sh",
      depends: ["a"],
      env_vars: { B_ONLY: "yes" },
      script: 'echo "value=${DEP_A_VALUE}-b" > "$RESULT_FILE"\necho "env=$GREETING/$B_ONLY" >> "$RESULT_FILE"\n',
    },
    {
      name: "c",
      script_type: "python",
      depends: ["a"],
      script:
        'import json, os\nn = int(json.loads(os.environ["FLOW_INPUTS"])["a"]["n"])\njson.dump({"n": n * 3, "b_only": os.environ.get("B_ONLY", "-")}, open(os.environ["RESULT_FILE"], "w"))\n',
    },
    {
      name: "d",
      script_type: "sh",
      depends: ["b", "c"],
      env_vars: { SHARED: "job" },
      script:
        'printf "sum=%s+%s\\nshared=%s\\nflow=%s\\nattempt=%s\\n" "$DEP_B_VALUE" "$DEP_C_N" "$SHARED" "$FLOW_ID" "$JOB_ATTEMPT" > "$RESULT_FILE"\n',
    },
  ],
};

function expectDiamond(view: FlowView): void {
  expect(view.status, JSON.stringify(view)).toBe("finished");
  expect(view.result).toEqual({
    a: { value: "hello-a", n: "2" },
    b: { value: "hello-a-b", env: "hello/yes" },
    c: { n: "6", b_only: "-" },
    d: { sum: "hello-a-b+6", shared: "job", flow: String(view.id), attempt: "1" },
  });
}

describe("the reference runner", () => {
  it("runs a diamond of python and sh jobs pushed to it, and streams a job's logs to its message", async () => {
    const { contextId, runnerId, proc, workDir, address } = await startRunnerIn("push");
    const flow = await submitFlow(contextId, DIAMOND);
    expectDiamond(await flowEnd(contextId, flow.id));
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(4);
    expect(readdirSync(workDir)).toEqual([]); // every job's work dir was removed

    // 120 lines: two full batches of 50, the rest in time or with the result.
    const chatty = await submitFlow(contextId, {
      jobs: [
        {
          name: "chatty",
          script_type: "sh",
          script: 'i=1\nwhile [ $i -le 120 ]; do echo "line $i"; i=$((i+1)); done\necho "to stderr" >&2\n',
        },
      ],
    });
    const ended = await flowEnd(contextId, chatty.id);
    expect(ended.status).toBe("finished");
    const jobId = (ended.jobs[0] as { id: number }).id;
    const job = (await admin.request("GET", `/v1/contexts/${contextId}/jobs/${actorId}/${jobId}`)) as RunnerJob;
    const message = (await admin.request(
      "GET",
      `/v1/contexts/${contextId}/messages/${actorId}/${job.message_base}`,
    )) as Message;
    const stdout = message.logs.filter((l) => l.stream === "stdout").map((l) => l.message);
    expect(stdout).toEqual(Array.from({ length: 120 }, (_, i) => `line ${i + 1}`));
    expect(message.logs.filter((l) => l.stream === "stderr").map((l) => l.message)).toEqual(["to stderr"]);
    for (const log of message.logs) expect(log.timestamp).toBeGreaterThan(1_600_000_000);

    // Deliveries are at-least-once: the same message and attempt again, genuinely signed, is
    // answered 2xx (so the coordinator does not try elsewhere) and does not run twice.
    const base = `${worker.url}/v1/contexts/${contextId}/flows/${chatty.id}/jobs/${jobId}`;
    const again = {
      message,
      context_id: contextId,
      flow_id: chatty.id,
      job_id: jobId,
      attempt: 1,
      runner_id: runnerId,
      callbacks: Object.fromEntries(["ack", "started", "heartbeat", "result", "logs"].map((n) => [n, `${base}/${n}`])),
    };
    const resent = await fetch(await signRequest(jsonPost(address, again), await coordinatorSigner()));
    expect(resent.status).toBe(200);
    expect(await resent.json()).toEqual({ duplicate: `${actorId}:${job.message_base} attempt 1` });
    // In one POST with a delivery that does not parse: each is answered as if alone, in order.
    const batch = await fetch(
      await signRequest(
        jsonPost(address, { deliveries: [again, { ...again, attempt: 0 }] }),
        await coordinatorSigner(),
      ),
    );
    expect(batch.status).toBe(200);
    const { results } = (await batch.json()) as { results: { status: number; type?: string }[] };
    expect(results).toEqual([
      { status: 200, duplicate: `${actorId}:${job.message_base} attempt 1` },
      expect.objectContaining({ status: 400, type: "/problems/invalid-body" }),
    ]);
    expect(proc.stdout()).toMatch(/a POST of 2 deliveries: 1 taken, 1 refused/);
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(5);
    expect(proc.stderr().trim().split("\n")).toEqual([
      expect.stringMatching(/warning: refused a malformed delivery \(400\): not a delivery: attempt: /),
    ]);
  });

  it("runs the same diamond leased by a pull runner", async () => {
    const { contextId, proc } = await startRunnerIn("pull");
    const flow = await submitFlow(contextId, DIAMOND);
    expectDiamond(await flowEnd(contextId, flow.id));
    expect(proc.stdout().match(/ start$/gm)).toHaveLength(4);
    expect(proc.stderr()).toBe("");
  });

  it("kills a job past its timeout with its whole process group; the flow errors and the dependent never runs", async () => {
    const { contextId, proc } = await startRunnerIn("push", ["--heartbeat", "1"]);
    const pidFile = path.join(tmp, "timeout-bg.pid");
    const flow = await submitFlow(contextId, {
      jobs: [
        {
          name: "slow",
          script_type: "sh",
          timeout: 2,
          env_vars: { PID_FILE: pidFile },
          script: "sh -c 'sleep 100 & echo $! > \"$PID_FILE\"; sleep 100'\n",
        },
        { name: "after", script_type: "sh", depends: ["slow"], script: 'echo never > "$RESULT_FILE"\n' },
      ],
    });
    const ended = await flowEnd(contextId, flow.id);
    expect(ended.status).toBe("error");
    const slow = ended.jobs.find((j) => j.key === "slow");
    const after = ended.jobs.find((j) => j.key === "after");
    expect(slow?.status).toBe("error");
    expect(slow?.error).toMatch(/killed after timeout of 2 s/);
    expect(after).toMatchObject({ status: "error", error: "not run: dependency slow failed" });
    // The runner logs a job's end once its result was answered: the flow may end first.
    await proc.waitForLine(/job \d+ \(slow, .*\) end: error after \d+\.\d s: killed after timeout of 2 s/);
    expect(proc.stdout()).not.toMatch(/\(after, /);
    // The background sleep was in the job's process group: it is gone too.
    const pid = Number(readFileSync(pidFile, "utf8").trim());
    expect(pid).toBeGreaterThan(0);
    await eventually(() => (alive(pid) ? undefined : true), 5_000, 150, `process ${pid} to be gone`);
    expect(proc.stderr()).toBe(""); // heartbeats (every second here) and the result were all taken
  });

  it("refuses unsigned, forged and tampered deliveries with 401 and runs nothing", async () => {
    const { contextId, proc, address } = await startRunnerIn("push");
    const url = address;
    const marker = path.join(tmp, "forged-ran");
    const now = Math.floor(Date.now() / 1000);
    const job = {
      id: 7,
      caller_id: actorId,
      context_id: contextId,
      flow_id: 1,
      script: `touch ${marker}`,
      script_type: "sh",
      timeout: 10,
      retries: 0,
      env_vars: {},
      result: {},
      prerequisites: [],
      depends: [],
      created_at: now,
      updated_at: now,
      status: "dispatched",
    };
    const base = `${worker.url}/v1/contexts/${contextId}/flows/1/jobs/7`;
    const delivery = {
      message: {
        id: 70,
        caller_id: actorId,
        context_id: contextId,
        message: "",
        message_type: "job",
        message_format_type: "text",
        timeout: 60,
        timeout_ack: 60,
        timeout_result: 60,
        job: [job],
        logs: [],
        created_at: now,
        updated_at: now,
        status: "dispatched",
        attempt: 1,
      },
      context_id: contextId,
      flow_id: 1,
      job_id: 7,
      attempt: 1,
      runner_id: 1,
      callbacks: {
        ack: `${base}/ack`,
        started: `${base}/started`,
        heartbeat: `${base}/heartbeat`,
        result: `${base}/result`,
        logs: `${base}/logs`,
      },
    };
    const coordinator = await coordinatorSigner();
    const kid = coordinator.keyid;
    const post = (body: unknown) => jsonPost(url, body);
    const send = async (request: Request) => {
      const response = await fetch(request);
      return { status: response.status, body: (await response.json()) as { type: string } };
    };

    const unsigned = await send(post(delivery));
    expect(unsigned).toMatchObject({ status: 401, body: { type: "/problems/signature-missing" } });

    const impostor = { keyid: kid, key: await importPrivateKey(await generateKeyPair()) };
    const forged = await send(await signRequest(post(delivery), impostor));
    expect(forged).toMatchObject({ status: 401, body: { type: "/problems/signature-invalid" } });

    const unknown = await send(await signRequest(post(delivery), { ...impostor, keyid: "someone-else" }));
    expect(unknown).toMatchObject({ status: 401, body: { type: "/problems/unknown-key" } });

    const genuine = await signRequest(post(delivery), coordinator);
    const tamperedBody = JSON.stringify({
      ...delivery,
      message: { ...delivery.message, job: [{ ...job, script: "touch /tmp/pwned" }] },
    });
    const tampered = await send(new Request(url, { method: "POST", headers: genuine.headers, body: tamperedBody }));
    expect(tampered).toMatchObject({ status: 401, body: { type: "/problems/digest-mismatch" } });

    // The control: the coordinator's own signature passes, so the refusals above were the signatures'.
    const control = await send(await signRequest(post({ not: "a delivery" }), coordinator));
    expect(control.status).toBe(400);

    await proc.waitForLine(/refused a malformed delivery \(400\)/);
    expect(proc.stderr().match(/refused an unauthenticated delivery \(401/g)).toHaveLength(4);
    expect(proc.stdout()).not.toMatch(/ start$/m);
    expect(await (await fetch(new URL("/health", url))).json()).toMatchObject({ running: 0 });
    expect(existsSync(marker)).toBe(false);
  });

  it("drains on SIGTERM: the running job finishes and reports, no new job is taken, exit 0", async () => {
    const { contextId, proc } = await startRunnerIn("push", ["--concurrency", "2", "--heartbeat", "1"]);
    const dir = path.join(tmp, "drain");
    mkdirSync(dir);
    const [started, go, late] = ["started", "go", "late"].map((f) => path.join(dir, f)) as [string, string, string];
    const first = await submitFlow(contextId, {
      jobs: [
        {
          name: "slow",
          script_type: "sh",
          timeout: 120,
          env_vars: { STARTED: started, GO: go },
          script: 'touch "$STARTED"\nwhile [ ! -e "$GO" ]; do sleep 0.1; done\necho "done=yes" > "$RESULT_FILE"\n',
        },
      ],
    });
    await eventually(() => (existsSync(started) ? true : undefined), 60_000, 150, "the slow job to run");

    proc.child.kill("SIGTERM");
    await proc.waitForLine(/draining: 1 job\(s\) running/);
    const second = await submitFlow(contextId, {
      jobs: [{ name: "late", script_type: "sh", env_vars: { LATE: late }, script: 'touch "$LATE"\n' }],
    });
    await proc.waitForLine(/refused delivery of message .*: draining \(503\)/);

    writeFileSync(go, "");
    expect(await proc.exited).toEqual({ code: 0, signal: null });
    const ended = await flowEnd(contextId, first.id);
    expect(ended.status).toBe("finished");
    expect(ended.result).toEqual({ slow: { done: "yes" } });

    expect(proc.stdout().match(/ start$/gm)).toHaveLength(1);
    expect(existsSync(late)).toBe(false);
    expect(proc.stderr()).toBe("");
    const waiting = await admin.loadFlow(contextId, second.id);
    expect(waiting.status).toBe("started");
    expect(waiting.jobs[0]?.status).toBe("dispatched");
  });
});
