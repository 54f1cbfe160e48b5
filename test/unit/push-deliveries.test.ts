import type http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  generateKeyPair,
  importPrivateKey,
  importPublicKey,
  keyThumbprint,
  type RequestSigner,
} from "../../shared/auth/index.js";
import type { DeliveryPayload } from "../../shared/model/index.js";
import { pushDeliveries } from "../../functions/flow/delivery.js";
import { freePort } from "../../infra/redis-server.js";
import { signedServer } from "../support/http.js";

/**
 * How the coordinator pushes deliveries to a runner, up to its `deliveries_per_post` in one
 * signed POST, and reads the answer, against a real HTTP server that verifies each signature
 * (an unsigned or badly signed POST is answered 401, which would show as refusals here).
 */

let key: RequestSigner;
let server: http.Server;
let address: string;
/** What the server received: each POST's body. */
let posts: { body: unknown }[];
/** How the server answers a POST's body. */
let answer: (body: unknown, res: http.ServerResponse) => void;

beforeAll(async () => {
  const jwk = await generateKeyPair();
  const kid = await keyThumbprint(jwk.x);
  key = { keyid: kid, key: await importPrivateKey(jwk) };
  const publicKey = await importPublicKey(jwk.x);
  server = signedServer(
    async (keyid) => (keyid === kid ? publicKey : null),
    (body, res) => {
      const parsed = JSON.parse(Buffer.from(body).toString("utf8")) as unknown;
      posts.push({ body: parsed });
      answer(parsed, res);
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
  it("puts up to deliveries_per_post in one signed POST, and one left over alone", async () => {
    const outcomes = await pushDeliveries(
      address,
      [1, 2, 3, 4, 5, 6, 7].map((n) => payload(n)),
      3,
      key,
    );
    expect(outcomes).toEqual(Array.from({ length: 7 }, () => ({ delivered: true })));
    const shapes = posts.map(
      (p) => deliveriesOf(p.body)?.map((d) => d.job_id) ?? (p.body as { job_id: number }).job_id,
    );
    expect(shapes.sort()).toEqual([[1, 2, 3], [4, 5, 6], 7].sort());
  });

  it("sends each delivery alone to a runner that takes one per POST", async () => {
    const outcomes = await pushDeliveries(address, [payload(1), payload(2)], 1, key);
    expect(outcomes).toEqual([{ delivered: true }, { delivered: true }]);
    expect(posts.map((p) => deliveriesOf(p.body))).toEqual([undefined, undefined]);
  });

  it("takes each delivery's own result: a 2xx acknowledges it, anything else puts it back", async () => {
    answer = (_body, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ results: [{ status: 202 }, { status: 429, detail: "at its limit" }, { status: 200 }] }));
    };
    const outcomes = await pushDeliveries(address, [payload(1), payload(2), payload(3)], 10, key);
    expect(outcomes).toEqual([
      { delivered: true },
      { delivered: false, reason: "answered 429 (at its limit)" },
      { delivered: true },
    ]);
  });

  it("puts every delivery of a POST back when the POST is refused, answered without a result each, or unanswered", async () => {
    answer = (_body, res) => void res.writeHead(503).end();
    expect(await pushDeliveries(address, [payload(1), payload(2)], 10, key)).toEqual([
      { delivered: false, reason: "answered 503 Service Unavailable" },
      { delivered: false, reason: "answered 503 Service Unavailable" },
    ]);

    answer = (_body, res) => void res.writeHead(200).end(JSON.stringify({ results: [{ status: 202 }] }));
    const short = await pushDeliveries(address, [payload(1), payload(2)], 10, key);
    expect(short.map((o) => o.delivered)).toEqual([false, false]);
    expect(short[0]).toMatchObject({ reason: "answered 200 without one result per delivery (2 sent)" });

    answer = (_body, res) => void res.writeHead(200).end("not json");
    expect((await pushDeliveries(address, [payload(1), payload(2)], 10, key)).map((o) => o.delivered)).toEqual([
      false,
      false,
    ]);

    const nobody = `http://127.0.0.1:${await freePort()}/`;
    const unreachable = await pushDeliveries(nobody, [payload(1), payload(2)], 10, key);
    expect(unreachable[1]).toMatchObject({ delivered: false, reason: expect.stringMatching(/^could not be reached/) });
  });

  it("keeps a POST's deliveries to about 1 MiB, however many deliveries_per_post allows", async () => {
    const big = "x".repeat(400_000);
    const outcomes = await pushDeliveries(address, [payload(1, big), payload(2, big), payload(3, big)], 10, key);
    expect(outcomes.every((o) => o.delivered)).toBe(true);
    expect(posts.map((p) => deliveriesOf(p.body)?.length ?? 1).sort()).toEqual([1, 2]);
  });
});
