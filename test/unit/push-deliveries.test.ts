import type http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  generateKeyPair,
  importPrivateKey,
  importPublicKey,
  keyThumbprint,
  signAnswer,
  type RequestSigner,
} from "../../shared/auth/index.js";
import type { DeliveryPayload } from "../../shared/model/index.js";
import { pushDeliveries, type PushTarget } from "../../functions/flow/delivery.js";
import { freePort } from "../../infra/redis-server.js";
import { signedServer } from "../support/http.js";

/**
 * How the coordinator pushes deliveries to a runner, up to its `deliveries_per_post` in one
 * signed POST, and reads the answer (with the attempts' ends it may report, signed by the
 * runner), against a real HTTP server that verifies each signature (an unsigned or badly signed
 * POST is answered 401, which would show as refusals here).
 */

let key: RequestSigner;
/** The runner's key, which signs answers that report how attempts ended. */
let runner: RequestSigner & { pubkey: string };
/** Another key, the runner's in nobody's records. */
let stranger: RequestSigner;
let server: http.Server;
let address: string;
/** What the server received: each POST's body. */
let posts: { body: unknown }[];
/** How the server answers a POST's body. */
let answer: (body: unknown, res: http.ServerResponse, request: Request) => void | Promise<void>;

beforeAll(async () => {
  const jwk = await generateKeyPair();
  const kid = await keyThumbprint(jwk.x);
  key = { keyid: kid, key: await importPrivateKey(jwk) };
  const publicKey = await importPublicKey(jwk.x);
  const runnerJwk = await generateKeyPair();
  runner = { keyid: "runner:1:1", key: await importPrivateKey(runnerJwk), pubkey: runnerJwk.x };
  stranger = { keyid: "runner:1:1", key: await importPrivateKey(await generateKeyPair()) };
  server = signedServer(
    async (keyid) => (keyid === kid ? publicKey : null),
    (body, res, request) => {
      const parsed = JSON.parse(Buffer.from(body).toString("utf8")) as unknown;
      posts.push({ body: parsed });
      void answer(parsed, res, request);
    },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  address = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

beforeEach(() => {
  posts = [];
  answer = (body, res) => {
    const list = deliveriesOf(body);
    if (!list) return void res.writeHead(202).end();
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ results: list.map(() => ({ status: 202 })) }));
  };
});

/** Every outcome of `pushDeliveries`, once all its POSTs are answered. */
const push = (...args: Parameters<typeof pushDeliveries>) => Promise.all(pushDeliveries(...args));

/** The runner at the test server, taking up to `perPost` deliveries a POST. */
function target(perPost: number, at = address): PushTarget {
  return { address: at, perPost, keyid: runner.keyid, pubkey: runner.pubkey, timeoutMs: 10_000 };
}

/** Answers `body` with `status`, signed by `signer` as the answer to `request` (unless null). */
async function signed(
  res: http.ServerResponse,
  request: Request,
  status: number,
  body: unknown,
  signer: RequestSigner | null = runner,
): Promise<void> {
  const bytes = new TextEncoder().encode(JSON.stringify(body));
  const headers = signer ? await signAnswer(request, status, bytes, signer) : {};
  res.writeHead(status, { "content-type": "application/json", ...headers }).end(bytes);
}

/** A delivery as far as the transport looks at it (the runner side is tested end to end). */
function payload(n: number, pad = ""): DeliveryPayload {
  return {
    message: { caller_id: 1, id: n, pad },
    context_id: 1,
    flow_id: 1,
    job_id: n,
    attempt: 1,
    runner_id: 1,
    callbacks: {},
  } as unknown as DeliveryPayload;
}

function deliveriesOf(body: unknown): { job_id: number }[] | undefined {
  return body && typeof body === "object" && "deliveries" in body
    ? (body as { deliveries: { job_id: number }[] }).deliveries
    : undefined;
}

describe("pushing deliveries", () => {
  it("settles each POST's outcomes when that POST is answered, not when all are", async () => {
    let release = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    answer = async (body, res) => {
      const list = deliveriesOf(body) ?? [];
      if (list[0]?.job_id === 1) await held; // the first POST waits for the test
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ results: list.map(() => ({ status: 202 })) }));
    };
    const outcomes = pushDeliveries(
      target(2),
      [1, 2, 3, 4].map((n) => payload(n)),
      key,
    );
    expect(await Promise.all(outcomes.slice(2))).toEqual([{ delivered: true }, { delivered: true }]);
    const first = await Promise.race([outcomes[0], new Promise((resolve) => setTimeout(resolve, 50, "held"))]);
    expect(first).toBe("held");
    release();
    expect(await Promise.all(outcomes.slice(0, 2))).toEqual([{ delivered: true }, { delivered: true }]);
  });

  it("puts up to deliveries_per_post in one signed POST, and one left over alone", async () => {
    const outcomes = await push(
      target(3),
      [1, 2, 3, 4, 5, 6, 7].map((n) => payload(n)),
      key,
    );
    expect(outcomes).toEqual(Array.from({ length: 7 }, () => ({ delivered: true })));
    const shapes = posts.map(
      (p) => deliveriesOf(p.body)?.map((d) => d.job_id) ?? (p.body as { job_id: number }).job_id,
    );
    expect(shapes.sort()).toEqual([[1, 2, 3], [4, 5, 6], 7].sort());
  });

  it("sends each delivery alone to a runner that takes one per POST", async () => {
    const outcomes = await push(target(1), [payload(1), payload(2)], key);
    expect(outcomes).toEqual([{ delivered: true }, { delivered: true }]);
    expect(posts.map((p) => deliveriesOf(p.body))).toEqual([undefined, undefined]);
  });

  it("takes each delivery's own result: a 2xx acknowledges it, anything else puts it back", async () => {
    answer = (_body, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ results: [{ status: 202 }, { status: 429, detail: "at its limit" }, { status: 200 }] }));
    };
    const outcomes = await push(target(10), [payload(1), payload(2), payload(3)], key);
    expect(outcomes).toEqual([
      { delivered: true },
      { delivered: false, reason: "answered 429 (at its limit)" },
      { delivered: true },
    ]);
  });

  it("puts every delivery of a POST back when the POST is refused, or the runner could not be reached", async () => {
    answer = (_body, res) => void res.writeHead(503).end();
    expect(await push(target(10), [payload(1), payload(2)], key)).toEqual([
      { delivered: false, reason: "answered 503 Service Unavailable" },
      { delivered: false, reason: "answered 503 Service Unavailable" },
    ]);

    const nobody = `http://127.0.0.1:${await freePort()}/`;
    const unreachable = await push(target(10, nobody), [payload(1), payload(2)], key);
    expect(unreachable[1]).toMatchObject({ delivered: false, reason: expect.stringMatching(/^could not be reached/) });
  });

  it("counts as not known, never to be sent again, a POST the runner may have taken without saying so", async () => {
    const unknown = async (perPost: number, timeoutMs = 10_000) =>
      (await push({ ...target(perPost), timeoutMs }, [payload(1), payload(2)], key)).map((o) =>
        o.delivered === "unknown" ? o.reason : o,
      );
    // No answer within the timeout: the runner has the request, and may be working on it.
    answer = (_body, res) => void setTimeout(() => res.writeHead(202).end(), 1_000);
    expect(await unknown(1, 200)).toEqual(["did not answer within 0.2 s", "did not answer within 0.2 s"]);
    // A gateway in front of the runner gave up waiting for it.
    answer = (_body, res) => void res.writeHead(504).end();
    expect(await unknown(1)).toEqual(Array(2).fill("answered 504 Gateway Timeout: a gateway's timeout"));
    // A 2xx status, and the rest of the answer cut, or not in time.
    answer = (_body, res) => {
      res.writeHead(200, { "content-type": "application/json", "content-length": "100" }).write('{"report":');
      setTimeout(() => res.destroy(), 20);
    };
    expect(await unknown(1)).toEqual(
      Array(2).fill(expect.stringMatching(/^answered 200, and the rest of the answer was cut \(/)),
    );
    answer = (_body, res) => void res.writeHead(200, { "content-length": "100" }).write("{");
    expect(await unknown(1, 300)).toEqual(
      Array(2).fill("answered 200, and the rest of the answer did not end within 0.3 s"),
    );
    // Several deliveries answered 2xx without one result each: any of them may have been taken.
    answer = (_body, res) => void res.writeHead(200).end(JSON.stringify({ results: [{ status: 202 }] }));
    expect(await unknown(10)).toEqual(Array(2).fill("answered 200 without one result per delivery (2 sent)"));
    answer = (_body, res) => void res.writeHead(200).end("not json");
    expect(await unknown(10)).toEqual(Array(2).fill("answered 200 without one result per delivery (2 sent)"));
  });

  it("keeps a POST's deliveries to about 1 MiB, however many deliveries_per_post allows", async () => {
    const big = "x".repeat(400_000);
    const outcomes = await push(target(10), [payload(1, big), payload(2, big), payload(3, big)], key);
    expect(outcomes.every((o) => o.delivered)).toBe(true);
    expect(posts.map((p) => deliveriesOf(p.body)?.length ?? 1).sort()).toEqual([1, 2]);
  });
});

describe("an answer that reports how the attempt ended", () => {
  const finished = { status: "finished", result: { out: "42" } };

  it("ends the attempt when the runner signed it as the answer to that POST, alone or in a batch", async () => {
    answer = (_body, res, request) => signed(res, request, 200, { report: finished });
    expect(await push(target(1), [payload(1)], key)).toEqual([{ delivered: true, report: { ...finished, logs: [] } }]);

    answer = (_body, res, request) =>
      signed(res, request, 200, {
        results: [
          {
            status: 200,
            report: {
              status: "error",
              error: "no such file",
              logs: [{ timestamp: 1, stream: "stderr", message: "x" }],
            },
          },
          { status: 202 },
          { status: 429, detail: "at its limit" },
        ],
      });
    expect(await push(target(10), [payload(1), payload(2), payload(3)], key)).toEqual([
      {
        delivered: true,
        report: {
          status: "error",
          error: "no such file",
          result: {},
          logs: [{ timestamp: 1, stream: "stderr", message: "x" }],
        },
      },
      { delivered: true },
      { delivered: false, reason: "answered 429 (at its limit)" },
    ]);
  });

  it("refuses a report without the runner's signature, under another key, or signed for another POST", async () => {
    const refusedFor = async (pattern: RegExp) => {
      const [outcome] = await push(target(1), [payload(1)], key);
      expect(outcome).toMatchObject({ delivered: false, reason: expect.stringMatching(pattern) });
    };
    answer = (_body, res, request) => signed(res, request, 200, { report: finished }, null);
    await refusedFor(/^answered 200 with a report not signed by the runner \(signature-missing/);

    answer = (_body, res, request) => signed(res, request, 200, { report: finished }, stranger);
    await refusedFor(/\(signature-invalid: /);

    answer = (_body, res, request) =>
      signed(res, request, 200, { report: finished }, { ...runner, keyid: "runner:1:2" });
    await refusedFor(/\(unknown-key: the answer is signed as "runner:1:2", not as the runner \(runner:1:1\)\)/);

    // An answer the runner really signed, for an earlier POST: replayed, it does not verify.
    let earlier: Request | undefined;
    answer = (_body, res, request) => {
      earlier ??= request;
      return signed(res, earlier, 200, { report: finished });
    };
    expect(await push(target(1), [payload(1)], key)).toEqual([{ delivered: true, report: expect.anything() }]);
    await refusedFor(/\(signature-invalid: /);

    // A body changed after signing.
    answer = async (_body, res, request) => {
      const bytes = new TextEncoder().encode(JSON.stringify({ report: finished }));
      const headers = await signAnswer(request, 200, bytes, runner);
      res.writeHead(200, headers).end(JSON.stringify({ report: { status: "finished", result: { out: "43" } } }));
    };
    await refusedFor(/\(digest-mismatch: /);
  });

  it("refuses a report that does not parse, and takes an answer without one as the acknowledgement", async () => {
    answer = (_body, res, request) => signed(res, request, 200, { report: { status: "exploded" } });
    const [bad] = await push(target(1), [payload(1)], key);
    expect(bad).toMatchObject({
      delivered: false,
      reason: expect.stringMatching(/^answered 200 with a report that does not parse: report\.status: /),
    });

    answer = (_body, res, request) => signed(res, request, 202, { accepted: "1:1 attempt 1" }, null);
    expect(await push(target(1), [payload(1)], key)).toEqual([{ delivered: true }]);
  });
});
