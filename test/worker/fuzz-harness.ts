import { afterAll, beforeAll, expect } from "vitest";
import { actorKeyId, generateKeyPair, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { BASE, signed, testWorker } from "./harness.js";

// What the fuzz tests (fuzz*.test.ts) share: a Worker with an actor, a context, a runner and a
// started flow to aim at; the routes that take a body; signed requests; and the checks every
// answer must pass, whatever arrived: never a 5xx, and every 4xx a problem document (on /rpc, a
// JSON-RPC error carrying one); a 400 names a field.

/** Runs per property (21 properties' worth): 150 in CI, about 3,000 cases; `npm run fuzz` runs 480, about 10,000. */
export const RUNS = Number(process.env.FUZZ_RUNS ?? 150);

/** The fuzzed Worker's actor (the context's admin), context, runner, and a job of a started flow. */
export interface FuzzIds {
  admin: { id: number; jwk: PrivateJwk };
  contextId: number;
  runnerId: number;
  runnerJwk: PrivateJwk;
  flowId: number;
  jobId: number;
}

export interface Route {
  name: string;
  method: string;
  path: () => string;
  fields: string[];
  /** Signed by the context's runner instead of the admin. */
  asRunner?: boolean;
}

/**
 * A Worker of the calling test file's own (`label` names its key prefix) with what the fuzz tests
 * aim at, created before the file's tests and deleted after them. Call it at the top level of a
 * test file. `ids` is filled in by the file's beforeAll: read it inside tests (route paths do).
 */
export function useFuzzTarget(label: string) {
  const w = testWorker(label);
  afterAll(() => w.cleanup());
  const ids = {} as FuzzIds;

  beforeAll(() => createTarget(w, ids));

  const ROUTES = fuzzRoutes(ids);

  /** A request with `body` as it is (never re-encoded), signed by the admin or the context's runner. */
  async function signedRequest(
    method: string,
    path: string,
    body?: string,
    options: { asRunner?: boolean; headers?: Record<string, string> } = {},
  ): Promise<Request> {
    const [jwk, keyid] = options.asRunner
      ? [ids.runnerJwk, runnerKeyId(ids.contextId, ids.runnerId)]
      : [ids.admin.jwk, actorKeyId(ids.admin.id)];
    return signed(method, path, jwk, keyid, undefined, {
      ...(body === undefined ? {} : { raw: body }),
      ...(options.headers ? { headers: options.headers } : {}),
    });
  }

  return { w, ids, ROUTES, signedRequest };
}

/** The actor, context, runner and started one-job flow the fuzz tests aim at, written into `ids`. */
async function createTarget(w: ReturnType<typeof testWorker>, ids: FuzzIds): Promise<void> {
  const a = await w.newActor();
  ids.admin = { id: a.actor.id, jwk: a.jwk };
  ids.contextId = (await a.client.createContext()).id;
  ids.runnerJwk = await generateKeyPair();
  ids.runnerId = (
    await a.client.createRunner(ids.contextId, { pubkey: ids.runnerJwk.x, runner_type: "sh", local: true })
  ).id;
  const flow = await a.client.submitFlow(ids.contextId, {
    start: true,
    jobs: [{ name: "f", script: "x", script_type: "sh" }],
  });
  ids.flowId = flow.id;
  ids.jobId = flow.jobs[0]?.id as number;
  expect(ids.jobId).toBeGreaterThan(0);
}

/**
 * The routes that take a body, with the fields each reads (paths read `ids` when called, inside
 * tests). Over 80 lines on purpose: it is a table, one entry per route, and reads best whole.
 */
function fuzzRoutes(ids: FuzzIds): Route[] {
  return [
    { name: "POST /v1/actors", method: "POST", path: () => "/v1/actors", fields: ["id", "pubkey", "address"] },
    {
      name: "PATCH /v1/actors/{actorId}",
      method: "PATCH",
      path: () => `/v1/actors/${ids.admin.id}`,
      fields: ["address"],
    },
    {
      name: "PUT /v1/actors/{actorId}/key",
      method: "PUT",
      path: () => `/v1/actors/${ids.admin.id}/key`,
      fields: ["pubkey"],
    },
    {
      name: "POST /v1/contexts",
      method: "POST",
      path: () => "/v1/contexts",
      fields: ["id", "admins", "readers", "executors"],
    },
    {
      name: "PUT /v1/contexts/{contextId}/permissions",
      method: "PUT",
      path: () => `/v1/contexts/${ids.contextId}/permissions`,
      fields: ["admins", "readers", "executors"],
    },
    {
      name: "POST /v1/contexts/{contextId}/runners",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/runners`,
      fields: ["id", "pubkey", "address", "topic", "local", "runner_type", "script_types", "concurrency"],
    },
    {
      name: "PATCH /v1/contexts/{contextId}/runners/{runnerId}",
      method: "PATCH",
      path: () => `/v1/contexts/${ids.contextId}/runners/${ids.runnerId}`,
      fields: ["pubkey", "address", "topic", "local", "script_types", "concurrency"],
    },
    { name: "POST /rpc", method: "POST", path: () => "/rpc", fields: ["jsonrpc", "id", "method", "params"] },
    {
      name: "POST /v1/contexts/{contextId}/flows",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/flows`,
      fields: ["id", "env_vars", "jobs", "start", "timeouts"],
    },
    {
      name: "PUT /v1/contexts/{contextId}/templates/{name}",
      method: "PUT",
      path: () => `/v1/contexts/${ids.contextId}/templates/fuzz`,
      fields: ["env_vars", "jobs", "timeouts", "inputs", "description"],
    },
    {
      name: "POST …/templates/{name}/flows",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/templates/fuzz/flows`,
      fields: ["version", "inputs", "start"],
    },
    {
      name: "POST /v1/contexts/{contextId}/jobs",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/jobs`,
      fields: ["job", "start", "timeouts"],
    },
    {
      name: "POST /v1/contexts/{contextId}/messages",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/messages`,
      fields: ["to", "message_type", "message_format_type", "subject", "message"],
    },
    {
      name: "POST …/flows/{flowId}/cancel",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/flows/${ids.flowId}/cancel`,
      fields: ["reason"],
    },
    {
      name: "POST …/runners/{runnerId}/lease",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/runners/${ids.runnerId}/lease`,
      fields: ["max"],
      asRunner: true,
    },
    {
      name: "POST …/jobs/{jobId}/result",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/flows/${ids.flowId}/jobs/${ids.jobId}/result`,
      fields: ["attempt", "status", "result", "error", "logs"],
      asRunner: true,
    },
    {
      name: "POST …/jobs/{jobId}/logs",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/flows/${ids.flowId}/jobs/${ids.jobId}/logs`,
      fields: ["attempt", "logs"],
      asRunner: true,
    },
    {
      name: "POST …/jobs/{jobId}/heartbeat",
      method: "POST",
      path: () => `/v1/contexts/${ids.contextId}/flows/${ids.flowId}/jobs/${ids.jobId}/heartbeat`,
      fields: ["attempt"],
      asRunner: true,
    },
  ];
}

interface Problem {
  type: string;
  status: number;
  field?: string;
}

/** What every problem document holds; a 400 for invalid input names the field at fault. */
function expectProblem(problem: Problem, status: number): void {
  expect(problem.status).toBe(status);
  expect(problem.type).toMatch(/^\/problems\//);
  if (problem.type === "/problems/invalid-input") expect(problem.field).toMatch(/^(body|param|query|params|header)/);
}

/**
 * Never a 5xx; a 4xx is a problem document. /rpc answers JSON-RPC instead: there a 4xx is a
 * JSON-RPC error whose `data` is the problem document, and no error, whatever the HTTP status,
 * carries a 5xx problem.
 */
export async function expectWellFormed(res: Response, path: string): Promise<void> {
  expect(res.status, `status ${res.status}`).toBeLessThan(500);
  if (new URL(path, BASE).pathname === "/rpc") {
    await expectRpcWellFormed(res);
    return;
  }
  if (res.status < 400) {
    await res.arrayBuffer();
    return;
  }
  expect(res.headers.get("content-type")).toBe("application/problem+json");
  expectProblem((await res.json()) as Problem, res.status);
}

interface RpcAnswer {
  jsonrpc?: unknown;
  result?: unknown;
  error?: { code?: unknown; message?: unknown; data?: Problem };
}

async function expectRpcWellFormed(res: Response): Promise<void> {
  if (res.status === 204) return; // notifications only: nothing to answer
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  const body = (await res.json()) as RpcAnswer | RpcAnswer[];
  const answers = Array.isArray(body) ? body : [body];
  if (res.status >= 400) {
    expect(answers).toHaveLength(1);
    expect(answers[0]?.error?.data, JSON.stringify(body)).toBeDefined();
    expectProblem(answers[0]?.error?.data as Problem, res.status);
  }
  for (const answer of answers) {
    expect(answer.jsonrpc).toBe("2.0");
    if (answer.error === undefined) continue;
    expect(answer.error.code).toEqual(expect.any(Number));
    expect(answer.error.message).toEqual(expect.any(String));
    if (answer.error.data !== undefined) {
      expect(answer.error.data.status, JSON.stringify(answer.error)).toBeLessThan(500);
      expectProblem(answer.error.data, answer.error.data.status);
    }
  }
}
