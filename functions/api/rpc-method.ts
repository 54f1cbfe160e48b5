import type { z } from "zod";
import type { FlowCall } from "../service/call.js";

/**
 * A JSON-RPC method: what it does, its params (by name: one zod object, the schema calls are
 * validated with), the schema of its result, and the service function behind it. The OpenRPC
 * document is generated from these same schemas.
 */
export interface Method<P extends z.ZodType = z.ZodType> {
  summary: string;
  params: P;
  result: z.ZodType;
  /** HTTP statuses of problems this method may answer besides 400, 403, 404 and 503 (409 conflict, 422 …). */
  alsoFails?: readonly number[];
  run(call: FlowCall, params: z.output<P>): Promise<unknown>;
}

/** A method's definition, its params typed from its schema. */
export function method<P extends z.ZodType>(definition: Method<P>): Method {
  return definition as unknown as Method;
}

/** The methods a transport offers, by name. */
export type MethodTable = Readonly<Record<string, Method>>;

/**
 * A method table built by its first caller and kept for the isolate: a table builds a zod schema
 * or more per method, and an isolate that never answers JSON-RPC need not (docs/architecture.md,
 * "Cold start"). A function rather than a module loaded with `import()`: in the one script
 * wrangler bundles, a module loaded that way is wrapped, with every module it imports, in a
 * function of its own, which made the whole start slower.
 */
export function lazyTable(build: () => MethodTable): () => MethodTable {
  let table: MethodTable | undefined;
  return () => (table ??= build());
}
