import type { OpenAPIHono } from "@hono/zod-openapi";
import { z } from "zod";
import {
  ActorRegistration,
  ContextCreation,
  Id,
  MessageSubmission,
  RunnerRegistration,
} from "../../shared/model/index.js";
import { FlowSubmission } from "../../shared/flow/index.js";
import { loadActor, registerActor } from "../service/actors.js";
import { createContext, loadContext } from "../service/contexts.js";
import { flowDag, loadFlow, startFlow, submitFlow } from "../service/flows.js";
import type { FlowCall } from "../service/call.js";
import { JobSubmission, loadJob, loadMessage, submitJob } from "../service/jobs.js";
import { sendMessage } from "../service/messages.js";
import { createRunner, loadRunner } from "../service/runners.js";
import { authenticate } from "./auth.js";
import { flowCall } from "./call.js";
import { invalidInput, toProblem } from "../core/errors.js";
import type { Problem } from "../core/problem.js";
import type { AppEnv } from "./app-env.js";

/** A JSON-RPC method: its params schema and the service function behind it. */
interface Method<P extends z.ZodType = z.ZodType> {
  params: P;
  run(call: FlowCall, params: z.output<P>): Promise<unknown>;
}

function method<P extends z.ZodType>(
  params: P,
  run: (call: FlowCall, params: z.output<P>) => Promise<unknown>,
): Method {
  return { params, run } as Method;
}

const ById = z.object({ id: Id }).strict();
const InContext = z.object({ context_id: Id, id: Id }).strict();
const ByCaller = z.object({ context_id: Id, caller_id: Id, id: Id }).strict();

/** herocoordinator's method names over the same service functions as the REST routes. */
const METHODS: Record<string, Method> = {
  "actor.create": method(ActorRegistration, async (call, p) => (await registerActor(call, p)).actor),
  "actor.load": method(ById, (call, p) => loadActor(call, p.id)),
  "context.create": method(ContextCreation, (call, p) => createContext(call, p)),
  "context.load": method(ById, (call, p) => loadContext(call, p.id)),
  "runner.create": method(RunnerRegistration.safeExtend({ context_id: Id }), (call, { context_id, ...rest }) =>
    createRunner(call, context_id, rest),
  ),
  "runner.load": method(InContext, (call, p) => loadRunner(call, p.context_id, p.id)),
  "flow.create": method(
    FlowSubmission.safeExtend({ context_id: Id, idempotency_key: z.string().min(1).max(128).optional() }),
    async (call, { context_id, idempotency_key, ...submission }) =>
      (await submitFlow(call, context_id, submission, idempotency_key)).view,
  ),
  "flow.load": method(InContext, (call, p) => loadFlow(call, p.context_id, p.id)),
  "flow.dag": method(InContext, (call, p) => flowDag(call, p.context_id, p.id)),
  "flow.start": method(InContext, (call, p) => startFlow(call, p.context_id, p.id)),
  "job.create": method(
    JobSubmission.safeExtend({ context_id: Id }),
    async (call, { context_id, ...input }) => (await submitJob(call, context_id, input)).job,
  ),
  "job.load": method(ByCaller, (call, p) => loadJob(call, p.context_id, p.caller_id, p.id)),
  "message.create": method(MessageSubmission.safeExtend({ context_id: Id }), (call, { context_id, ...input }) =>
    sendMessage(call, context_id, input),
  ),
  "message.load": method(ByCaller, (call, p) => loadMessage(call, p.context_id, p.caller_id, p.id)),
};

/** JSON-RPC error codes: the spec's, plus -320xx mirroring the HTTP status of the problem. */
const CODES: Record<number, number> = { 400: -32602, 401: -32001, 403: -32003, 404: -32004, 409: -32009, 503: -32053 };

type RpcId = string | number | null;
type RpcResponse =
  | { jsonrpc: "2.0"; id: RpcId; result: unknown }
  | { jsonrpc: "2.0"; id: RpcId; error: { code: number; message: string; data?: unknown } };

function errorResponse(id: RpcId, code: number, message: string, problem?: Problem): RpcResponse {
  return { jsonrpc: "2.0", id, error: { code, message, ...(problem ? { data: problem.toJSON() } : {}) } };
}

function fromProblem(id: RpcId, problem: Problem): RpcResponse {
  return errorResponse(id, CODES[problem.status] ?? -32603, problem.detail ?? problem.title, problem);
}

const Envelope = z.object({
  jsonrpc: z.literal("2.0"),
  method: z.string(),
  params: z.unknown().optional(),
  id: z.union([z.string(), z.number(), z.null()]).optional(),
});

/** Runs one call; undefined for a notification (no id), which gets no answer. */
async function dispatch(call: FlowCall, raw: unknown): Promise<RpcResponse | undefined> {
  const envelope = Envelope.safeParse(raw);
  if (!envelope.success)
    return errorResponse(null, -32600, 'Invalid Request: expected {jsonrpc: "2.0", method, params, id}');
  const { id, method: name, params } = envelope.data;
  const answer = async (): Promise<RpcResponse> => {
    const target = Object.hasOwn(METHODS, name) ? METHODS[name] : undefined;
    if (!target) return errorResponse(id ?? null, -32601, `Method not found: ${name}`);
    const parsed = target.params.safeParse(params ?? {});
    if (!parsed.success) return fromProblem(id ?? null, invalidInput(parsed.error, "params"));
    try {
      return { jsonrpc: "2.0", id: id ?? null, result: await target.run(call, parsed.data) };
    } catch (error) {
      const problem = toProblem(error);
      if (problem.status === 500) console.error(`rpc ${name}:`, error);
      return fromProblem(id ?? null, problem);
    }
  };
  const response = await answer();
  return id === undefined ? undefined : response;
}

/**
 * `POST /rpc`: JSON-RPC 2.0 (single calls and batches) behind the same signature check as the
 * REST routes. A refused signature answers with the problem's HTTP status and a JSON-RPC error.
 */
export function registerRpc(app: OpenAPIHono<AppEnv>): void {
  app.post("/rpc", async (c) => {
    try {
      await authenticate(c, async () => {});
    } catch (error) {
      const problem = toProblem(error);
      return c.json(fromProblem(null, problem), problem.status, problem.headers);
    }
    const call = flowCall(c);
    let body: unknown;
    try {
      body = JSON.parse(new TextDecoder().decode(call.body));
    } catch {
      return c.json(errorResponse(null, -32700, "Parse error: the body is not JSON"), 200);
    }
    if (Array.isArray(body)) {
      if (body.length === 0) return c.json(errorResponse(null, -32600, "Invalid Request: empty batch"), 200);
      const answers = [];
      for (const item of body) answers.push(await dispatch(call, item));
      const sent = answers.filter((a) => a !== undefined);
      return sent.length > 0 ? c.json(sent, 200) : c.body(null, 204);
    }
    const answer = await dispatch(call, body);
    return answer ? c.json(answer, 200) : c.body(null, 204);
  });
  app.openAPIRegistry.registerPath({
    method: "post",
    path: "/rpc",
    tags: ["json-rpc"],
    summary: "JSON-RPC 2.0",
    description: `Methods: ${Object.keys(METHODS).join(", ")}. Signed like every /v1 route. Errors carry the problem document in error.data; codes -32602 invalid params, -32001 unauthorized, -32003 forbidden, -32004 not found, -32009 conflict, -32053 storage unavailable.`,
    security: [{ httpSignature: [] }],
    responses: { 200: { description: "A JSON-RPC response (or an array of them for a batch)" } },
  });
}
