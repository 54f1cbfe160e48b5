import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RESET_GRACE_SECONDS } from "../../functions/api/auth.js";
import { REVOCATION_CHECK_MS } from "../../functions/core/key-cache.js";
import { actorKeyId, generateKeyPair, randomToken, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { deletePrefix } from "../support/prefix.js";
import { signed, testWorker } from "./harness.js";
import { PullRunner } from "./pull-runner.js";

// A captured request (method, target URI, body digest, signature with its nonce) cannot be
// replayed anywhere. Sent again as it is, its nonce is found where that route keeps nonces (an
// actor's requests in one place, a submission's in its context's slot, a runner's webhook in its
// job's object); sent anywhere else, to another route, with another method or into another
// context, its signature no longer verifies, since it covers the method and the whole target
// URI; and after the database was wiped (its nonces gone with it) it is older than the database.
// What the nonce does not do: refuse the same nonce in a request the signer signs afresh for
// another scope. That is not a replay, only a signer reusing its own nonces.

const w = testWorker("replay");
afterAll(() => w.cleanup());

const ACTOR = 5;
const jwk: PrivateJwk = await generateKeyPair();
const keyid = actorKeyId(ACTOR);
const CTX = 3;
const OTHER = 4;
let runner: PullRunner;

/** Registers the actor and its two contexts, with the ids they had (again after a wipe). */
async function register(): Promise<void> {
  await w.anonymous.registerActor(jwk, { id: ACTOR });
  const client = await w.clientFor(jwk, keyid);
  await client.createContext({ id: CTX });
  await client.createContext({ id: OTHER });
}

beforeAll(async () => {
  await register();
  runner = await PullRunner.register(w, await w.clientFor(jwk, keyid), CTX);
});

/** Sends a request; its status and problem type. */
async function send(request: Request): Promise<[number, string | undefined]> {
  const res = await w.fetch(request);
  const body = (await res.json()) as { type?: string };
  return [res.status, res.status >= 400 ? body.type : undefined];
}

/** The captured request sent again, as it is or to another path or with another method. */
async function again(captured: Request, change: { path?: string; method?: string } = {}): Promise<Request> {
  const url = new URL(captured.url);
  if (change.path) url.pathname = change.path;
  const body = captured.method === "GET" ? undefined : await captured.clone().arrayBuffer();
  const method = change.method ?? captured.method;
  return new Request(url, { method, headers: captured.headers, ...(method !== "GET" && body ? { body } : {}) });
}

const job = (name: string) => ({ name, script: "true", script_type: "sh" as const });
const flowBody = { start: true, jobs: [job("a")] };
const flowsIn = async (ctx: number) => (await (await w.clientFor(jwk, keyid)).listFlows(ctx)).total;

describe("a captured request", () => {
  it("is refused sent again to its route (its nonce) and sent anywhere else (its signature)", async () => {
    const read = await signed("GET", `/v1/contexts/${CTX}`, jwk, keyid);
    const captured = read.clone();
    expect(await send(read)).toEqual([200, undefined]);
    expect(await send(await again(captured))).toEqual([401, "/problems/nonce-replayed"]);
    expect(await send(await again(captured, { path: `/v1/contexts/${OTHER}` }))).toEqual([
      401,
      "/problems/signature-invalid",
    ]);
    expect(await send(await again(captured, { path: `/v1/contexts/${CTX}/runners` }))).toEqual([
      401,
      "/problems/signature-invalid",
    ]);
    expect(await send(await again(captured, { method: "DELETE" }))).toEqual([401, "/problems/signature-invalid"]);
  });

  it("of a submission (its nonce spent in its context's slot) is refused again, and in another context", async () => {
    const submit = await signed("POST", `/v1/contexts/${CTX}/flows`, jwk, keyid, flowBody);
    const captured = submit.clone();
    const before = await flowsIn(CTX);
    expect((await send(submit))[0]).toBe(201);
    expect(await send(await again(captured))).toEqual([401, "/problems/nonce-replayed"]);
    expect(await send(await again(captured, { path: `/v1/contexts/${OTHER}/flows` }))).toEqual([
      401,
      "/problems/signature-invalid",
    ]);
    expect([await flowsIn(CTX), await flowsIn(OTHER)]).toEqual([before + 1, 0]);
  });

  it("of a runner's webhook (its nonce kept by the job's object) is refused again, and on another job", async () => {
    const client = await w.clientFor(jwk, keyid);
    await client.submitFlow(CTX, { start: true, jobs: [job("a"), job("b")] });
    const [d, e] = await runner.leaseSome(2);
    if (!d || !e) throw new Error("nothing leased");
    const path = (url: string) => new URL(url).pathname;
    const beat = await signed("POST", path(d.callbacks.heartbeat), runner.jwk, runnerKeyId(CTX, runner.id), {
      attempt: d.attempt,
    });
    const captured = beat.clone();
    expect((await send(beat))[0]).toBe(200);
    expect(await send(await again(captured))).toEqual([401, "/problems/nonce-replayed"]);
    expect(await send(await again(captured, { path: path(e.callbacks.heartbeat) }))).toEqual([
      401,
      "/problems/signature-invalid",
    ]);
  });

  it("is refused after the database was wiped, though its nonce went with it: it is older than the database", async () => {
    const read = await signed("GET", `/v1/contexts/${CTX}`, jwk, keyid);
    const captured = read.clone();
    expect(await send(read)).toEqual([200, undefined]);

    // Wiped, and restored as an operator would (the same actor, key and contexts) a little
    // later: the signature is still fresh (300 s), its nonce gone.
    await deletePrefix(w.redis, w.prefix);
    await new Promise((resolve) => setTimeout(resolve, (RESET_GRACE_SECONDS + 1) * 1000 + REVOCATION_CHECK_MS));
    await register();
    expect(await send(await again(captured))).toEqual([401, "/problems/signature-expired"]);
    // What the signer signs now is taken, and so is a request signed just before the database
    // was made, within the grace a request needs to arrive.
    expect(await send(await signed("GET", `/v1/contexts/${CTX}`, jwk, keyid))).toEqual([200, undefined]);
    const justBefore = Math.floor(Date.now() / 1000) - RESET_GRACE_SECONDS + 1;
    expect(
      await send(await signed("GET", `/v1/contexts/${CTX}`, jwk, keyid, undefined, { created: justBefore })),
    ).toEqual([200, undefined]);
  });
});

describe("a nonce", () => {
  it("is refused in any request of the same scope, and taken again in a fresh signature for another", async () => {
    const nonce = randomToken();
    const get = (path: string) => signed("GET", path, jwk, keyid, undefined, { nonce });
    expect(await send(await get(`/v1/contexts/${CTX}`))).toEqual([200, undefined]);
    // The actor's requests but submissions keep their nonces in one place: refused on another route.
    expect(await send(await get(`/v1/contexts/${OTHER}`))).toEqual([401, "/problems/nonce-replayed"]);
    // A submission keeps its nonce in its context's slot: this one is taken there (no replay:
    // the signer signed it afresh), once.
    const submit = () => signed("POST", `/v1/contexts/${CTX}/flows`, jwk, keyid, flowBody, { nonce });
    expect((await send(await submit()))[0]).toBe(201);
    expect(await send(await submit())).toEqual([401, "/problems/nonce-replayed"]);
  });
});
