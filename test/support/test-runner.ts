/**
 * A minimal push runner for tests that measure the coordinator rather than script execution:
 * it verifies each delivery's signature against the coordinator's published keys, answers 2xx
 * (the acknowledgement), reports `started`, and reports a result computed from the job (no
 * script is run). Run as its own process:
 *
 *   COORDINATOR_URL=… CONTEXT_ID=… RUNNER_ID=… KEY_FILE=… [PORT=0] [HOLD=n] [FAIL=a,b]
 *   [CHAOS=1] [SILENT=1] [LATE=1] [POISON=1] node --import tsx test/support/test-runner.ts
 *
 * HOLD=n keeps results back until n deliveries arrived, then sends them all at once (to test
 * concurrent results); FAIL lists job names whose result is an error, FAIL_MATCH is a pattern
 * of such names; CHAOS=1 sends every
 * result twice and a late `started` after it (duplicated and reordered webhooks). Prints
 * `listening <port>`.
 *
 * Fault switches: SILENT=1 answers 2xx to every delivery and never reports anything (a runner
 * that acknowledges and disappears); LATE=1 keeps the result of a job's first attempt back until
 * the job's next attempt is delivered here (so it arrives after that attempt's lease ran out),
 * then sends it before working on the new attempt; POISON=1 posts an unreadable result
 * (`status: "exploded"`) before each real one; REFUSE_FILE=<path> answers 503 to deliveries
 * while that file exists (a runner that is down, then comes back).
 *
 * By default it behaves as docs/runners.md, "Writing a runner", teaches (the benchmark's headline
 * rows use it so): each delivery is answered 2xx first, and only once that answer has been
 * written does the runner send a signed `started` report, then, once that is answered, a signed
 * result report, each its own webhook POST.
 *
 * Fast path: FAST=1 reports no `started`, only the result (a job that ends at once needs no
 * start; the coordinator takes a result straight after the acknowledgement), as the reference
 * runner does for a job that ends within its `--started-after`. BATCH_RESULTS=1
 * sends results through the batched webhook (`POST …/reports`, up to 100 a request, at most two
 * requests on the way, the results of one turn of its event loop together on the next turn when
 * fewer are), as the reference runner's `--batch` does; results of jobs outside any flow are not
 * supported there.
 *
 * Pull: PULL=n makes it a pull runner (register it without an address): it leases up to n jobs at
 * a time and reports on them in batches (`POST …/reports`: `ack` and the result of each job, at
 * most 100 reports a request, at most two requests on the way), polling again at once after work
 * came, when a batch of its reports is answered after a lease that brought none while reports
 * were on the way (they held the slots), and after 5 ms (doubling to 100 ms) when none did and
 * none were. Push switches other than TIMES do not apply to it.
 *
 * A slow answer: ANSWER_AFTER_MS=n holds the answer to every POST of deliveries n ms (what it
 * took runs meanwhile, as with a runner that answers late, or a network that delays the answer).
 *
 * Load: WORK_MS=n works n ms on each job before reporting; TIMES=1 prints `delivery <epoch ms>
 * load <attempts held>` for every delivery taken (the load counts the new one). Reports are
 * retried for REPORT_RETRY_MS (default 30 s) on network errors and 5xx.
 *
 * Results in the answer: INLINE=1 answers each delivery 200 with its result (`{ "report": {...} }`,
 * signed by the runner as the answer to that POST, after WORK_MS), printing `inline <job> flow <f>
 * attempt <n>`, and reports nothing through webhooks (a runner whose jobs end before it answers).
 *
 * Several deliveries in one POST (`{ "deliveries": [...] }`, a runner registered with
 * `deliveries_per_post` above 1) are taken one by one and answered with one result each; it prints
 * `batch of <n>` for each such POST.
 *
 * A job named `bytes-<n>…` reports a result with a value of n characters (`blob`), to test sizes.
 * A job whose environment has `ADD_RESULT` (a JSON object) adds its values to its result, and
 * one with `ADD_JOBS` (a JSON list) reports those jobs to add to its flow (growth), one with
 * `ADD_JOBS_MANY=<n>:<bytes>` n jobs `many-<i>` after it, each with a script of that many bytes.
 *
 * A delivery of an attempt it already took is answered 2xx and not run again (printed as
 * `duplicate <job> flow <f> attempt <n>`), as a runner that deduplicates on the message and
 * attempt does. For counting, it prints `ran <job> flow <f> attempt <n> avoid <runner|->` for every
 * delivery it takes, and `answered <result|poison> <job> flow <f> attempt <n> <status> <problem type|outcome>`
 * for every result report (each try; `failed <error>` when no answer came).
 */
import { existsSync, readFileSync } from "node:fs";
import type http from "node:http";
import type { AddressInfo } from "node:net";
import {
  importPrivateKey,
  importPublicKey,
  parsePrivateJwk,
  runnerKeyId,
  signAnswer,
  signRequest,
} from "../../shared/auth/index.js";
import { DeliveryPayload } from "../../shared/model/index.js";
import { signedServer } from "./http.js";
import { TestReports, type BatchReport } from "./test-runner-reports.js";

const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`test-runner: ${name} is required`);
  return value;
};

const base = env("COORDINATOR_URL").replace(/\/+$/, "");
const contextId = Number(env("CONTEXT_ID"));
const runnerId = Number(env("RUNNER_ID"));
const jwk = parsePrivateJwk(readFileSync(env("KEY_FILE"), "utf8"), "KEY_FILE");
const signer = { keyid: runnerKeyId(contextId, runnerId), key: await importPrivateKey(jwk) };
const hold = Number(process.env.HOLD ?? 0);
const failing = new Set((process.env.FAIL ?? "").split(",").filter(Boolean));
const failMatch = process.env.FAIL_MATCH ? new RegExp(process.env.FAIL_MATCH) : undefined;
/** The attempts taken, by `<flow>:<job>:<attempt>`: a repeated delivery is not run twice. */
const taken = new Set<string>();
const chaos = process.env.CHAOS === "1";
const silent = process.env.SILENT === "1";
const late = process.env.LATE === "1";
const poison = process.env.POISON === "1";
const workMs = Number(process.env.WORK_MS ?? 0);
const times = process.env.TIMES === "1";
const fast = process.env.FAST === "1";
const pull = Number(process.env.PULL ?? 0);
const refuseFile = process.env.REFUSE_FILE;
const reportRetryMs = Number(process.env.REPORT_RETRY_MS ?? 30_000);
const batchResults = process.env.BATCH_RESULTS === "1";
const inline = process.env.INLINE === "1";
const answerAfterMs = Number(process.env.ANSWER_AFTER_MS ?? 0);
/** Attempts taken and not reported on yet. */
let load = 0;

const directory = (await (await fetch(`${base}/.well-known/http-message-signatures-directory`)).json()) as {
  keys: { kid: string; x: string }[];
};
const keys = new Map(await Promise.all(directory.keys.map(async (k) => [k.kid, await importPublicKey(k.x)] as const)));

/** Where its reports go (test-runner-reports.ts). */
const reports = new TestReports({ base, contextId, runnerId, signer, retryMs: reportRetryMs });

/**
 * What a job reports: an error if FAIL or FAIL_MATCH names it, else a result naming the job; a
 * job named `bytes-<n>…` adds a value `blob` of n characters (sizes: test/e2e/limits.test.ts);
 * `ADD_RESULT` and `ADD_JOBS` in its environment add to its result and to its flow.
 */
function outcomeOf(name: string, attempt: number, env: Record<string, string> = {}): Record<string, unknown> {
  if (failing.has(name) || failMatch?.test(name)) return { status: "error", error: `job ${name} failed on purpose` };
  const blob = /^bytes-(\d+)/.exec(name);
  const extra = env.ADD_RESULT ? (JSON.parse(env.ADD_RESULT) as Record<string, string>) : {};
  const result = {
    job: name,
    attempt: String(attempt),
    ...(blob ? { blob: "x".repeat(Number(blob[1])) } : {}),
    ...extra,
  };
  const jobs = env.ADD_JOBS ? (JSON.parse(env.ADD_JOBS) as unknown[]) : manyJobs(name, env.ADD_JOBS_MANY);
  return { status: "finished", result, ...(jobs ? { jobs } : {}) };
}

/** `ADD_JOBS_MANY=<n>:<bytes>`: n jobs after `name`, each with a script of that many bytes. */
function manyJobs(name: string, many: string | undefined): unknown[] | undefined {
  if (!many) return undefined;
  const [n, bytes] = many.split(":").map(Number) as [number, number];
  const script = `#${"x".repeat(Math.max(0, bytes - 1))}`;
  return Array.from({ length: n }, (_, i) => ({ name: `many-${i}`, script, script_type: "sh", depends: [name] }));
}

/** LATE: first attempts' results held back, by `<flow>:<job>`, until the job's next attempt comes. */
const lateResults = new Map<string, () => Promise<void>>();

const held: (() => Promise<void>)[] = [];

async function run(payload: DeliveryPayload): Promise<void> {
  const job = payload.message.job[0];
  const name = job?.name ?? String(payload.job_id);
  const label = `${name} flow ${payload.flow_id} attempt ${payload.attempt}`;
  if (silent) return;
  const lateKey = `${payload.flow_id}:${payload.job_id}`;
  const stale = lateResults.get(lateKey);
  if (stale) {
    lateResults.delete(lateKey);
    await stale();
  }
  if (!fast) await reports.report(payload.callbacks.started, { attempt: payload.attempt });
  if (workMs > 0) await new Promise((r) => setTimeout(r, workMs));
  const body = { attempt: payload.attempt, ...outcomeOf(name, payload.attempt, payload.message.job[0]?.env_vars) };
  const finish = async () => {
    if (poison) await reports.report(payload.callbacks.result, { ...body, status: "exploded" }, `poison ${label}`);
    load--;
    if (batchResults)
      await reports.queueResult({
        entry: { flow_id: payload.flow_id, job_id: payload.job_id, event: "result", body },
        label: `result ${label}`,
      });
    else await reports.report(payload.callbacks.result, body, `result ${label}`);
    if (chaos) {
      await Promise.all([
        reports.report(payload.callbacks.result, body),
        reports.report(payload.callbacks.started, { attempt: payload.attempt }),
      ]);
    }
  };
  if (late && payload.attempt === 1) {
    lateResults.set(lateKey, finish);
    return;
  }
  if (hold > 0) {
    held.push(finish);
    if (held.length >= hold) await Promise.all(held.splice(0).map((f) => f()));
    return;
  }
  await finish();
}

/** A report of a batch, and the label its answer is printed with (results only). */
/** PULL: leases up to `pull` jobs at a time, runs them at once and reports on them in batches. */
async function pullLoop(): Promise<void> {
  const path = `/v1/contexts/${contextId}/runners/${runnerId}/lease`;
  const onTheWay = new Set<Promise<void>>();
  let idle = 5;
  for (;;) {
    while (onTheWay.size >= 2) await Promise.race(onTheWay);
    const request = await signRequest(
      new Request(`${base}${path}`, {
        method: "POST",
        body: JSON.stringify({ max: pull }),
        headers: { "content-type": "application/json" },
      }),
      signer,
    );
    const res = await fetch(request).catch(() => undefined);
    const deliveries = res?.ok ? ((await res.json()) as { deliveries: unknown[] }).deliveries : [];
    if (deliveries.length === 0) {
      // Results on the way hold the slots: leasing again is worth it once they are answered,
      // as the reference runner leases only for the slots whose results were taken.
      if (onTheWay.size > 0) await Promise.race(onTheWay);
      else {
        await new Promise((r) => setTimeout(r, idle));
        idle = Math.min(idle * 2, 100);
      }
      continue;
    }
    idle = 5;
    const batch: BatchReport[] = [];
    for (const raw of deliveries) {
      const payload = DeliveryPayload.parse(raw);
      const name = payload.message.job[0]?.name ?? String(payload.job_id);
      if (times) console.log(`delivery ${Date.now()} load ${deliveries.length}`);
      console.log(`ran ${name} flow ${payload.flow_id} attempt ${payload.attempt} avoid -`);
      const ids = { flow_id: payload.flow_id, job_id: payload.job_id };
      batch.push({ entry: { ...ids, event: "ack", body: { attempt: payload.attempt } } });
      batch.push({
        entry: {
          ...ids,
          event: "result",
          body: { attempt: payload.attempt, ...outcomeOf(name, payload.attempt, payload.message.job[0]?.env_vars) },
        },
        label: `result ${name} flow ${payload.flow_id} attempt ${payload.attempt}`,
      });
    }
    for (let i = 0; i < batch.length; i += 100) {
      const sent = reports.reportBatch(batch.slice(i, i + 100)).finally(() => onTheWay.delete(sent));
      onTheWay.add(sent);
    }
  }
}

if (pull > 0) {
  console.log("pulling");
  process.on("SIGTERM", () => process.exit(0));
  await pullLoop();
}

/**
 * Takes one delivery: the status a POST of it alone is answered with (2xx: taken) and, with
 * INLINE, the report of its result that goes in the answer (again for a duplicate: the result of
 * an attempt is the same each time).
 */
function take(raw: unknown): { status: number; report?: Record<string, unknown>; then?: () => void } {
  const parsed = DeliveryPayload.safeParse(raw);
  if (!parsed.success) return { status: 400 };
  if (refuseFile && existsSync(refuseFile)) return { status: 503 };
  const { flow_id, job_id, attempt, message } = parsed.data;
  const name = message.job[0]?.name ?? String(job_id);
  const report = inline ? { report: outcomeOf(name, attempt, message.job[0]?.env_vars) } : {};
  const key = `${flow_id}:${job_id}:${attempt}`;
  if (taken.has(key)) {
    console.log(`duplicate ${name} flow ${flow_id} attempt ${attempt}`);
    return { status: 200, ...report };
  }
  taken.add(key);
  if (times) console.log(`delivery ${Date.now()} load ${load + 1}`);
  if (inline) {
    console.log(`ran ${name} flow ${flow_id} attempt ${attempt} avoid ${message.avoid_runner_id ?? "-"}`);
    console.log(`inline ${name} flow ${flow_id} attempt ${attempt}`);
    return { status: 200, ...report };
  }
  load++;
  // Printed with its `delivery` line, in the same turn: the benchmark pairs them.
  console.log(`ran ${name} flow ${flow_id} attempt ${attempt} avoid ${message.avoid_runner_id ?? "-"}`);
  // A runner that answers late works meanwhile (ANSWER_AFTER_MS); else the job is worked on once
  // the answer (the acknowledgement) has been written, as a runner that answers at once and then
  // runs the job does: its `started` never overtakes its acknowledgement.
  if (answerAfterMs > 0) {
    void run(parsed.data);
    return { status: 200 };
  }
  return { status: 200, then: () => void run(parsed.data) };
}

/**
 * Answers with `body`, signed as the answer to `request` when it reports results (INLINE: after
 * WORK_MS, the jobs' work), after ANSWER_AFTER_MS.
 */
async function answer(res: http.ServerResponse, request: Request, status: number, body?: unknown): Promise<void> {
  if (answerAfterMs > 0) await new Promise((r) => setTimeout(r, answerAfterMs));
  if (body === undefined) return void res.writeHead(status).end();
  if (inline && workMs > 0) await new Promise((r) => setTimeout(r, workMs));
  const bytes = new TextEncoder().encode(JSON.stringify(body));
  const headers = inline ? await signAnswer(request, status, bytes, signer) : {};
  res.writeHead(status, { "content-type": "application/json", ...headers }).end(bytes);
}

const server = signedServer(
  async (kid) => keys.get(kid) ?? null,
  (body, res, request) => {
    const raw = JSON.parse(Buffer.from(body).toString("utf8")) as unknown;
    // Several deliveries in one POST (a runner registered with deliveries_per_post above 1).
    if (raw && typeof raw === "object" && "deliveries" in raw && Array.isArray(raw.deliveries)) {
      console.log(`batch of ${raw.deliveries.length}`);
      const taken = raw.deliveries.map((one: unknown) => take(one));
      // "close" comes after the answer was written, or when its connection was lost before.
      res.once("close", () => taken.forEach((t) => t.then?.()));
      void answer(res, request, 200, {
        results: taken.map((t) => ({ status: t.status, ...(t.report ? { report: t.report } : {}) })),
      });
      return;
    }
    const { status, report, then } = take(raw);
    if (then) res.once("close", then);
    void answer(res, request, status, report ? { report } : undefined);
  },
);

server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  console.log(`listening ${(server.address() as AddressInfo).port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
