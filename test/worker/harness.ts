import {
  createExecutionContext,
  createScheduledController,
  runInDurableObject,
  waitOnExecutionContext,
} from "cloudflare:test";
import { env } from "cloudflare:workers";
import { expect } from "vitest";
import worker from "../../functions/index.js";
import type { Env } from "../../functions/core/env.js";
import { scopeFor, type FlowScope } from "../../functions/core/scopes.js";
import { coordinatorStub, dispatcherStub } from "../../functions/core/stubs.js";
import type { Dispatcher } from "../../functions/dispatch/dispatcher.js";
import type { FlowCoordinator } from "../../functions/flow/coordinator.js";
import {
  actorKeyId,
  generateKeyPair,
  importPrivateKey,
  signRequest,
  type PrivateJwk,
} from "../../shared/auth/index.js";
import { ApiError, CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import type { Actor } from "../../shared/model/index.js";
import { Keys } from "../../shared/keys.js";
import { connectRedis } from "../../shared/store/redis.js";
import { eventually } from "../support/eventually.js";
import { deletePrefix, freshPrefix } from "../support/prefix.js";

/** The base URL tests address the Worker by; it never leaves the isolate. */
export const BASE = "http://coordinator.test";

/**
 * The real Worker (inside workerd, storage through the REST endpoint) under a key prefix of this
 * test file's own, so files never see each other's actors or contexts.
 */
export function testWorker(label: string, overrides: Partial<Env> = {}) {
  const prefix = freshPrefix(label);
  const workerEnv: Env = { ...env, KEY_PREFIX: prefix, ...overrides };
  /** Answers a request as the Worker does, and waits for the work it left to its execution context. */
  const fetch = async (request: Request): Promise<Response> => {
    const ctx = createExecutionContext();
    const response = await worker.fetch(request as Request<unknown, IncomingRequestCfProperties>, workerEnv, ctx);
    await waitOnExecutionContext(ctx);
    return response;
  };
  const redis = connectRedis({ url: env.UPSTASH_REDIS_REST_URL, token: env.UPSTASH_REDIS_REST_TOKEN });
  const anonymous = new CoordinatorClient({ baseUrl: BASE, fetch });
  const keys = new Keys(prefix);
  /** The stub of a scope's FlowCoordinator, typed with its class for runInDurableObject. */
  const objectOf = (scope: FlowScope) => ({
    scope,
    stub: coordinatorStub(workerEnv, scope) as unknown as DurableObjectStub<FlowCoordinator>,
  });
  return {
    prefix,
    /** Every key of this file's prefix, built as the coordinator builds it. */
    keys,
    env: workerEnv,
    fetch,
    redis,
    anonymous,
    /** Registers a new actor and returns it with a client signing as it. */
    async newActor(input: { id?: number } = {}): Promise<{ actor: Actor; jwk: PrivateJwk; client: CoordinatorClient }> {
      const jwk = await generateKeyPair();
      const actor = await anonymous.registerActor(jwk, input);
      return { actor, jwk, client: anonymous.as(await signerFromJwk(jwk, actorKeyId(actor.id))) };
    },
    /** A client signing with `jwk` as `keyid`. */
    async clientFor(jwk: PrivateJwk, keyid: string): Promise<CoordinatorClient> {
      return anonymous.as(await signerFromJwk(jwk, keyid));
    },
    /**
     * Runs the cron trigger's handler (the supervisor's sweep), waits for all it started, then for
     * the sweep of every context it handed to a dispatcher (their alarms): until the counter of
     * context sweeps settled has grown by the contexts handed over.
     */
    async sweep(): Promise<void> {
      const counters = async () => {
        const [swept, settled] = await redis.exec<(string | null)[]>(["HMGET", keys.counters(), "swept", "settled"]);
        return { swept: Number(swept ?? 0), settled: Number(settled ?? 0) };
      };
      const before = await counters();
      const ctx = createExecutionContext();
      worker.scheduled(createScheduledController({ scheduledTime: Date.now(), cron: "* * * * *" }), workerEnv, ctx);
      await waitOnExecutionContext(ctx);
      const handed = (await counters()).swept - before.swept;
      await eventually(
        async () => ((await counters()).settled - before.settled >= handed ? true : undefined),
        20_000,
        20,
        `the sweeps of ${handed} context(s)`,
      );
    },
    /** A flow's FlowCoordinator (its Durable Object) and the scope it is called with. */
    flowStub(contextId: number, flowId: number) {
      return objectOf(scopeFor({ prefix, origin: BASE }, contextId, { flowId }));
    },
    /** The FlowCoordinator of a job run outside any flow, and its scope. */
    jobStub(contextId: number, callerId: number, jobId: number) {
      return objectOf(scopeFor({ prefix, origin: BASE }, contextId, { callerId, jobId }));
    },
    /** A context's Dispatcher (its Durable Object), typed with its class for runInDurableObject. */
    dispatcherStub(contextId: number) {
      return dispatcherStub(workerEnv, { prefix, contextId, origin: BASE }) as unknown as DurableObjectStub<Dispatcher>;
    },
    cleanup: () => deletePrefix(redis, prefix),
  };
}

export type TestWorker = ReturnType<typeof testWorker>;
type FlowStub = ReturnType<TestWorker["flowStub"]>["stub"];

/**
 * Takes a FlowCoordinator's alarm away (deletes it) and returns when it was to ring: from then on
 * no real alarm rings by itself, and the test rings it with {@link ringAlarm} when it chooses.
 */
export function takeAlarm(stub: FlowStub): Promise<number | null> {
  return runInDurableObject(stub, async (_instance, state) => {
    const at = await state.storage.getAlarm();
    await state.storage.deleteAlarm();
    return at;
  });
}

/** Rings a FlowCoordinator's alarm now: runs its alarm handler, whether or not an alarm is set. */
export function ringAlarm(stub: FlowStub): Promise<void> {
  return runInDurableObject(stub, (instance) => instance.alarm());
}

/** Waits until the wall clock is past `at` (epoch ms): a flow's deadlines compare with it. */
export async function waitUntilPast(at: number): Promise<void> {
  await new Promise((r) => setTimeout(r, Math.max(0, at - Date.now()) + 50));
}

/** Resolves with what `promise` failed with, which must be an ApiError (a JSON-RPC error has its code in `rpcCode`). */
export async function failure(promise: Promise<unknown>): Promise<ApiError & { rpcCode?: number }> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(ApiError);
  return error as ApiError & { rpcCode?: number };
}

/** What {@link signed} sends besides a JSON body. */
export interface SignedOptions {
  /** A body sent as it is (not JSON-encoded), instead of the JSON one. */
  raw?: string;
  /** More headers (a content-type here replaces the JSON one). */
  headers?: Record<string, string>;
  /** The signature's creation time (epoch seconds), to sign as if at another time. */
  created?: number;
  /** The signature's nonce (a fresh one unless given). */
  nonce?: string;
}

/**
 * A request to the Worker at `path`, signed (RFC 9421) as `keyid` with `jwk`. `body`, when given,
 * is sent as JSON; so is `options.raw`, as it is.
 */
export async function signed(
  method: string,
  path: string,
  jwk: PrivateJwk,
  keyid: string,
  body?: unknown,
  options: SignedOptions = {},
): Promise<Request> {
  const text = options.raw ?? (body === undefined ? undefined : JSON.stringify(body));
  const headers = { ...(text === undefined ? {} : { "content-type": "application/json" }), ...options.headers };
  const request = new Request(`${BASE}${path}`, { method, headers, ...(text === undefined ? {} : { body: text }) });
  return signRequest(
    request,
    { keyid, key: await importPrivateKey(jwk) },
    {
      ...(options.created === undefined ? {} : { created: options.created }),
      ...(options.nonce === undefined ? {} : { nonce: options.nonce }),
    },
  );
}
