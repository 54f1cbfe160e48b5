/**
 * A minimal push runner for tests that measure the coordinator rather than script execution:
 * it verifies each delivery's signature against the coordinator's published keys, answers 2xx
 * (the acknowledgement), reports `started`, and reports a result computed from the job (no
 * script is run). Run as its own process:
 *
 *   COORDINATOR_URL=… CONTEXT_ID=… RUNNER_ID=… KEY_FILE=… [PORT=0] [HOLD=n] [FAIL=a,b]
 *   node --import tsx test/support/test-runner.ts
 *
 * HOLD=n keeps results back until n deliveries arrived, then sends them all at once (to test
 * concurrent results); FAIL lists job names whose result is an error; CHAOS=1 sends every
 * result twice and a late `started` after it (duplicated and reordered webhooks). Prints
 * `listening <port>`.
 */
import { readFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { importPrivateKey, importPublicKey, parsePrivateJwk, runnerKeyId, signRequest, verifyRequest } from "../../shared/auth/index.js";
import { DeliveryPayload } from "../../shared/model/index.js";

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
const chaos = process.env.CHAOS === "1";

const directory = (await (await fetch(`${base}/.well-known/http-message-signatures-directory`)).json()) as { keys: { kid: string; x: string }[] };
const keys = new Map(await Promise.all(directory.keys.map(async (k) => [k.kid, await importPublicKey(k.x)] as const)));

/** POSTs a signed webhook, retrying network errors and 5xx a few times (at-least-once). */
async function report(url: string, body: unknown): Promise<void> {
  const target = `${base}${new URL(url, base).pathname}`;
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const request = await signRequest(new Request(target, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } }), signer);
      const res = await fetch(request);
      await res.arrayBuffer();
      if (res.status < 500) return;
    } catch {
      // retry
    }
    await new Promise((r) => setTimeout(r, 100 * 2 ** attempt));
  }
}

const held: (() => Promise<void>)[] = [];

async function run(payload: DeliveryPayload): Promise<void> {
  const job = payload.message.job[0];
  const name = job?.name ?? String(payload.job_id);
  await report(payload.callbacks.started, { attempt: payload.attempt });
  const body = failing.has(name)
    ? { attempt: payload.attempt, status: "error", error: `job ${name} failed on purpose` }
    : { attempt: payload.attempt, status: "finished", result: { job: name, attempt: String(payload.attempt) } };
  const finish = async () => {
    await report(payload.callbacks.result, body);
    if (chaos) {
      await Promise.all([report(payload.callbacks.result, body), report(payload.callbacks.started, { attempt: payload.attempt })]);
    }
  };
  if (hold > 0) {
    held.push(finish);
    if (held.length >= hold) await Promise.all(held.splice(0).map((f) => f()));
    return;
  }
  await finish();
}

const server = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    void (async () => {
      const body = new Uint8Array(Buffer.concat(chunks));
      const headers = new Headers(Object.entries(req.headers).flatMap(([k, v]) => (typeof v === "string" ? [[k, v] as [string, string]] : [])));
      const request = new Request(`http://${req.headers.host}${req.url}`, { method: req.method ?? "POST", headers, body });
      try {
        await verifyRequest(request, { body, now: Math.floor(Date.now() / 1000), skewSeconds: 300, resolveKey: async (kid) => keys.get(kid) ?? null });
      } catch {
        res.writeHead(401).end();
        return;
      }
      const parsed = DeliveryPayload.safeParse(JSON.parse(Buffer.from(body).toString("utf8")));
      if (!parsed.success) {
        res.writeHead(400).end();
        return;
      }
      res.writeHead(200).end();
      void run(parsed.data);
    })();
  });
});

server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  console.log(`listening ${(server.address() as AddressInfo).port}`);
});
process.on("SIGTERM", () => server.close(() => process.exit(0)));
