import { z } from "zod";
import { PROBLEMS } from "../core/problems.js";
import { PROBLEM_CODES, PROTOCOL_ERRORS, ProblemDocument } from "./rpc-dispatch.js";
import { rpcMethods, type Method } from "./rpc-methods.js";
import { NOTIFICATIONS, SOCKET_METHODS } from "./rpc-subscriptions.js";

/** The OpenRPC version the document follows (1.3: a method without `result` is a notification). */
const OPENRPC_VERSION = "1.3.2";

type JsonSchema = Record<string, unknown>;

/** Every `$ref` to `#/$defs/<name>` (zod's) pointed at `#/components/schemas/<name>` instead. */
function toComponentRefs<T>(value: T): T {
  return JSON.parse(JSON.stringify(value).replaceAll('"$ref":"#/$defs/', '"$ref":"#/components/schemas/')) as T;
}

/**
 * The JSON schemas of the document, from the zod schemas the methods validate with: each named
 * schema (a shared model's `meta({ id })`) becomes one component every use refers to. A name
 * that came out as two different schemas (a model whose input and output differ, used both
 * ways) is refused rather than documented wrong.
 */
class Schemas {
  readonly components: Record<string, JsonSchema> = {};

  /** `schema` as JSON Schema: as callers send it (`input`: defaults optional) or as answers carry it (`output`). */
  add(schema: z.ZodType, io: "input" | "output"): JsonSchema {
    const json = z.toJSONSchema(schema, { io, target: "draft-2020-12", unrepresentable: "any" }) as JsonSchema;
    const { $schema: _, $defs, ...root } = json;
    for (const [name, def] of Object.entries(toComponentRefs(($defs ?? {}) as Record<string, JsonSchema>))) {
      const known = this.components[name];
      if (known && JSON.stringify(known) !== JSON.stringify(def))
        throw new Error(`the OpenRPC document has two schemas named ${name}: give one another id`);
      this.components[name] = def;
    }
    return toComponentRefs(root);
  }

  /** A schema with its `$ref` (if it is one) looked up in the components. */
  resolve(schema: JsonSchema): JsonSchema {
    const ref = schema.$ref;
    return typeof ref === "string" ? (this.components[ref.split("/").pop() ?? ""] ?? schema) : schema;
  }
}

/** A by-name method's params: one content descriptor per property of its params object, required ones first. */
function paramsOf(schemas: Schemas, params: z.ZodType, io: "input" | "output") {
  const root = schemas.resolve(schemas.add(params, io));
  const properties = (root.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((root.required ?? []) as string[]);
  return Object.entries(properties)
    .map(([name, schema]) => ({ name, required: required.has(name), schema }))
    .sort((a, b) => Number(b.required) - Number(a.required));
}

/** An error component's name: its problem title as an identifier ("Not found" → NotFound). */
const errorName = (title: string) =>
  title.replace(/(?:^|[^A-Za-z0-9]+)([A-Za-z0-9])/g, (_, c: string) => c.toUpperCase());

/** The errors problems become (the problem document in `error.data`), by HTTP status, and the protocol's own. */
function errorComponents() {
  const byStatus = new Map<number, { name: string; error: Record<string, unknown> }>();
  for (const [status, code] of Object.entries(PROBLEM_CODES)) {
    const kinds = Object.entries(PROBLEMS).filter(([, p]) => p.status === Number(status));
    const title = kinds[0]?.[1].title ?? `HTTP ${status}`;
    // error.data is the problem document (components.schemas.Problem), of one of these types.
    const types = kinds.map(([kind]) => `/problems/${kind}`);
    byStatus.set(Number(status), { name: errorName(title), error: { code, message: title, "x-problem-types": types } });
  }
  const protocol = {
    ParseError: { code: PROTOCOL_ERRORS.parse, message: "Parse error: the message is not JSON" },
    InvalidRequest: { code: PROTOCOL_ERRORS.invalidRequest, message: "Invalid Request: not a JSON-RPC 2.0 call" },
    MethodNotFound: { code: PROTOCOL_ERRORS.methodNotFound, message: "Method not found (on this transport)" },
    InternalError: { code: PROTOCOL_ERRORS.internal, message: "Internal error: the details are in the logs" },
  };
  const errors = { ...Object.fromEntries([...byStatus.values()].map((e) => [e.name, e.error])), ...protocol };
  const refTo = (status: number) => {
    const entry = byStatus.get(status);
    if (!entry) throw new Error(`no JSON-RPC error code for HTTP ${status}`);
    return { $ref: `#/components/errors/${entry.name}` };
  };
  return { errors, refTo };
}

/** What every method may fail with: invalid params, not allowed, not found, storage away. */
const COMMON_FAILURES = [400, 403, 404, 503];

function buildDocument() {
  const schemas = new Schemas();
  const { errors, refTo } = errorComponents();
  const describe = (name: string, m: Method, socketOnly: boolean) => ({
    name,
    summary: m.summary,
    paramStructure: "by-name",
    params: paramsOf(schemas, m.params, "input"),
    result: { name: "result", schema: schemas.add(m.result, "output") },
    errors: [...new Set([...COMMON_FAILURES, ...(m.alsoFails ?? [])])].sort((a, b) => a - b).map(refTo),
    socketOnly,
  });
  const methods = [
    ...Object.entries(rpcMethods()).map(([name, m]) => describe(name, m, false)),
    ...Object.entries(SOCKET_METHODS).map(([name, m]) => describe(name, m, true)),
    ...Object.entries(NOTIFICATIONS).map(([name, n]) => ({
      name,
      summary: n.summary,
      paramStructure: "by-name",
      params: paramsOf(schemas, n.params, "output"),
      "x-notification": true,
      socketOnly: true,
    })),
  ];
  schemas.add(ProblemDocument, "output");
  return { methods, components: { schemas: schemas.components, errors } };
}

let built: ReturnType<typeof buildDocument> | undefined;

/**
 * The OpenRPC document of `/rpc` at `origin`: every method of POST /rpc and of a WebSocket
 * session with its params and result, the errors, and the notifications a session sends.
 * Built once per isolate from the method tables' zod schemas.
 */
export function openRpcDocument(origin: string) {
  built ??= buildDocument();
  const http = { name: "http", url: `${origin}/rpc`, summary: "POST /rpc: a call or a batch per request" };
  const websocket = {
    name: "websocket",
    url: `${origin.replace(/^http/, "ws")}/rpc`,
    summary: "GET /rpc with Upgrade: websocket: a session of calls, subscriptions and notifications",
  };
  return {
    openrpc: OPENRPC_VERSION,
    info: {
      title: "Flow coordinator JSON-RPC",
      version: "0.1.0",
      description:
        "JSON-RPC 2.0 over the same service functions as the REST API (/openapi.json). POST /rpc: each request signed (RFC 9421) like every /v1 route; a refused signature is answered with its HTTP status and error -32001 (Unauthorized). GET /rpc with Upgrade: websocket: a session acting as the principal that signed the handshake (or whose ?ticket= from POST /v1/tickets it redeemed); a refused handshake is an HTTP 401 problem. A problem becomes error.data; its HTTP status gives the code (400 → -32602, 4xx/5xx → -320xx).",
    },
    servers: [http, websocket],
    methods: built.methods.map(({ socketOnly, ...m }) => (socketOnly ? { ...m, servers: [websocket] } : m)),
    components: built.components,
  };
}
