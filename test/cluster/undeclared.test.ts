import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { actorKeyId, generateKeyPair } from "../../shared/auth/index.js";
import { ApiError, signerFromJwk } from "../../shared/client/index.js";
import { startPrivateStack, type PrivateStack } from "../support/private-stack.js";
import { RedisCluster } from "../support/redis-cluster.js";

// A Worker whose REST endpoint fronts a Redis Cluster without the var STORAGE_CLUSTER = "true":
// its first script that joins a context's keys with a global one (the key epoch's read, at
// registration already) is refused CROSSSLOT. It answers 503 storage-cluster-undeclared naming
// the setting (never a 500), logs it once, and stores nothing of the refused call: the same
// calls succeed on a Worker given the var.

const cluster = RedisCluster.attach(inject("redisCluster"));
let stack: PrivateStack;

beforeAll(async () => {
  stack = await startPrivateStack("cluster-undeclared", {
    cluster: { seeds: cluster.seeds },
    vars: { STORAGE_CLUSTER: "false" },
    cron: false,
  });
});
afterAll(() => stack?.stop());

/** The problem a refused call was answered with (the call must be refused). */
async function refusal(call: Promise<unknown>): Promise<{ status: number; type: string; setting?: unknown }> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof ApiError)) throw new Error(`expected a refusal, got ${String(error)}`);
  const { type, setting, detail } = error.problem as { type: string; setting?: unknown; detail?: string };
  expect(detail).toMatch(/STORAGE_CLUSTER = "true"/);
  return { status: error.status, type, ...(setting !== undefined ? { setting } : {}) };
}

const UNDECLARED = { status: 503, type: "/problems/storage-cluster-undeclared", setting: "STORAGE_CLUSTER" };

describe("a Worker on a Redis Cluster without STORAGE_CLUSTER", () => {
  it("answers 503 naming the setting, logs it once, and stores nothing of what it refused", async () => {
    const jwk = await generateKeyPair();
    for (let i = 0; i < 3; i++) expect(await refusal(stack.anonymous.registerActor(jwk))).toEqual(UNDECLARED);

    // The same key registers on a Worker told of the cluster: the refused tries took nothing.
    const declared = await stack.startWorker({ STORAGE_CLUSTER: "true" });
    const actor = await declared.anonymous.registerActor(jwk);
    const signer = await signerFromJwk(jwk, actorKeyId(actor.id));
    const ctx = (await declared.anonymous.as(signer).createContext()).id;
    const flow = { start: true, jobs: [{ name: "a", script: "true", script_type: "sh" as const }] };
    // Signed calls on the undeclared Worker: refused the same way, a flow start included.
    const undeclared = stack.anonymous.as(signer);
    expect(await refusal(undeclared.createContext())).toEqual(UNDECLARED);
    expect(await refusal(undeclared.submitFlow(ctx, flow))).toEqual(UNDECLARED);
    expect((await declared.anonymous.as(signer).submitFlow(ctx, flow)).status).toBe("started");

    const log = stack.workerLog();
    expect(log.match(/^.*storage: storage is a Redis Cluster .*STORAGE_CLUSTER.*$/gm)).toHaveLength(1);
    expect(log).not.toMatch(/ 500 Internal Server Error|Uncaught/);
  });
});
