import { z } from "zod";
import { invalidInput, toProblem } from "../core/errors.js";
import type { Problem } from "../core/problem.js";
import type { FlowCall } from "../service/call.js";
import type { MethodTable } from "./rpc-methods.js";
import { ProblemBody } from "./schemas.js";

/** The problem document an error carries in `error.data` (named for the OpenRPC document). */
export const ProblemDocument = ProblemBody.meta({ id: "Problem" });

/**
 * JSON-RPC error codes for problems: -32602 (the spec's invalid params) for a 400, and -320xx
 * mirroring the HTTP status of the rest (401 → -32001, 503 → -32053). A 500 is the spec's -32603.
 */
export const PROBLEM_CODES: Readonly<Record<number, number>> = {
  400: -32602,
  401: -32001,
  403: -32003,
  404: -32004,
  409: -32009,
  422: -32022,
  503: -32053,
};

/** The JSON-RPC 2.0 protocol's own error codes. */
export const PROTOCOL_ERRORS = {
  parse: -32700,
  invalidRequest: -32600,
  methodNotFound: -32601,
  internal: -32603,
} as const;

export type RpcId = string | number | null;

/** A JSON-RPC error object; `data` is the problem document when a problem caused it. */
export interface RpcError {
  code: number;
  message: string;
  data?: unknown;
}

export type RpcResponse =
  { jsonrpc: "2.0"; id: RpcId; result: unknown } | { jsonrpc: "2.0"; id: RpcId; error: RpcError };

/** What a JSON-RPC message (a call or a batch) is answered with; undefined when nothing is (notifications only). */
export type RpcAnswer = RpcResponse | RpcResponse[] | undefined;

/** An error response without a problem behind it (a protocol error). */
export function errorResponse(id: RpcId, code: number, message: string): RpcResponse {
  return { jsonrpc: "2.0", id, error: { code, message } };
}

/** The code a problem is answered with. */
export function problemCode(problem: Problem): number {
  return PROBLEM_CODES[problem.status] ?? PROTOCOL_ERRORS.internal;
}

/** An error response for a problem, the problem document in `error.data`. */
export function fromProblem(id: RpcId, problem: Problem): RpcResponse {
  const error = { code: problemCode(problem), message: problem.detail ?? problem.title, data: problem.toJSON() };
  return { jsonrpc: "2.0", id, error };
}

const Envelope = z.object({
  jsonrpc: z.literal("2.0"),
  method: z.string(),
  params: z.unknown().optional(),
  id: z.union([z.string(), z.number(), z.null()]).optional(),
});

/** The methods a transport runs, and what to say of a name it does not have. */
export interface Transport {
  /** Its table, built on the first call (rpc-method.ts, lazyTable). */
  methods: () => MethodTable;
  /** Why a method is missing, when it exists on another transport. */
  notHere?: (name: string) => string | undefined;
}

/** Runs one call; undefined for a notification (no id), which gets no answer. */
async function dispatch(call: FlowCall, transport: Transport, raw: unknown): Promise<RpcResponse | undefined> {
  const envelope = Envelope.safeParse(raw);
  if (!envelope.success)
    return errorResponse(
      null,
      PROTOCOL_ERRORS.invalidRequest,
      'Invalid Request: expected {jsonrpc: "2.0", method, params, id}',
    );
  const { id, method: name, params } = envelope.data;
  const response = await run(call, transport, id ?? null, name, params);
  return id === undefined ? undefined : response;
}

async function run(call: FlowCall, transport: Transport, id: RpcId, name: string, params: unknown) {
  const methods = transport.methods();
  const target = Object.hasOwn(methods, name) ? methods[name] : undefined;
  if (!target)
    return errorResponse(id, PROTOCOL_ERRORS.methodNotFound, transport.notHere?.(name) ?? `Method not found: ${name}`);
  const parsed = target.params.safeParse(params ?? {});
  if (!parsed.success) return fromProblem(id, invalidInput(parsed.error, "params"));
  try {
    return { jsonrpc: "2.0" as const, id, result: await target.run(call, parsed.data) };
  } catch (error) {
    const problem = toProblem(error);
    if (problem.status === 500) console.error(`rpc ${name}:`, error);
    return fromProblem(id, problem);
  }
}

/**
 * Answers one JSON-RPC message, as text: a call, or a batch whose calls run in order. A message
 * that is not JSON is answered -32700, an empty batch -32600; notifications get no answer.
 */
export async function answerMessage(call: FlowCall, transport: Transport, text: string): Promise<RpcAnswer> {
  let message: unknown;
  try {
    message = JSON.parse(text);
  } catch {
    return errorResponse(null, PROTOCOL_ERRORS.parse, "Parse error: the message is not JSON");
  }
  if (!Array.isArray(message)) return dispatch(call, transport, message);
  if (message.length === 0) return errorResponse(null, PROTOCOL_ERRORS.invalidRequest, "Invalid Request: empty batch");
  const answers: RpcResponse[] = [];
  for (const item of message) {
    const answer = await dispatch(call, transport, item);
    if (answer) answers.push(answer);
  }
  return answers.length > 0 ? answers : undefined;
}
