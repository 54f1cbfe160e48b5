import { z } from "@hono/zod-openapi";
import { PROBLEMS, problemUri, type ProblemType } from "../core/problems.js";
import type { FlowListQuery } from "../../shared/store/index.js";
import {
  Actor,
  ActorRegistration,
  ActorUpdate,
  Context,
  ContextCreation,
  ContextDetails,
  ContextLimitsUpdate,
  RetentionUpdate,
  Flow,
  FLOW_IDENTITY_LIMITS,
  FlowStatus,
  FlowView,
  KeyRotation,
  parseLabelFilter,
  type LabelFilter,
  MAX_ID,
  Message,
  PermissionsUpdate,
  Runner,
  RunnerDispatch,
  RunnerJob,
  RunnerRegistration,
  RunnerUpdate,
  RunnerWithDispatch,
} from "../../shared/model/index.js";

/**
 * A schema named for the OpenAPI document (a `$ref` component) with zod's own metadata, which
 * the generator reads. The shared models are named where they are defined, so schemas built from
 * them refer to them by name too; this is for the shapes only routes know.
 */
export function named<T extends z.ZodType>(schema: T, id: string): T {
  return schema.meta({ id });
}

/** The shared models every route answers with (each named in shared/model). */
export const schemas = {
  Actor,
  Context,
  Runner,
  RunnerDispatch,
  RunnerWithDispatch,
  Flow,
  FlowView,
  RunnerJob,
  Message,
  ActorRegistration,
  ActorUpdate,
  KeyRotation,
  ContextCreation,
  ContextLimitsUpdate,
  ContextDetails,
  RetentionUpdate,
  PermissionsUpdate,
  RunnerRegistration,
  RunnerUpdate,
};

/** An id in a path: a u32 above zero. */
export const PathId = z.coerce.number().int().min(1).max(MAX_ID);

/** The `Idempotency-Key` header of a create that may be retried (a flow, a schedule). */
export const IdempotencyHeader = z.object({
  "idempotency-key": z
    .string()
    .min(1)
    .max(128)
    .regex(/^[\x21-\x7e]+$/)
    .optional(),
});

/** `?offset=&limit=` of a listing. */
export const PageQuery = z.object({
  offset: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(500).default(50),
});

/** A page of a listing. */
export function pageOf<T extends z.ZodType>(item: T, name: string) {
  return z.object({ items: z.array(item), total: z.int(), next: z.int().optional() }).openapi(name);
}

const PROBLEM_URIS = Object.keys(PROBLEMS).map((kind) => problemUri(kind as ProblemType)) as [string, ...string[]];

/** An RFC 9457 problem document; `type` is one of the catalog's (PROBLEMS, listed in the document's description). */
export const ProblemBody = z
  .object({
    type: z.enum(PROBLEM_URIS),
    title: z.string(),
    status: z.int(),
    detail: z.string().optional(),
    instance: z.string().optional(),
    field: z.string().optional(),
    errors: z.array(z.object({ field: z.string(), message: z.string() })).optional(),
    needed: z.array(z.string()).optional(),
  })
  .openapi("Problem");

/** An error answer: a problem document, and what it means here. */
export const problem = (description: string) => ({
  description,
  content: { "application/problem+json": { schema: ProblemBody } },
});

/** The error answers every signed route can give. */
export const signedErrors = {
  400: problem("Invalid input: `field` names the first field at fault, `errors` all of them"),
  401: problem("The signature is missing, malformed, invalid, expired, from the future, replayed, or its key unknown"),
  403: problem("The caller may not do this: `needed` names the permission lists that would allow it"),
  404: problem("No such object"),
  431: problem("A header is larger than 8 KiB, or all of them together larger than 16 KiB"),
  503: problem("Storage is unavailable; retry later"),
} as const;

/** A submission's Idempotency-Key was used before for another request. */
export const idempotencyReused = {
  422: problem("This Idempotency-Key was used for another request; use a new key"),
} as const;

/** A start past the context's flow_starts_per_minute. */
export const throttled = {
  429: {
    description:
      "The context's flow_starts_per_minute is used up (`flow-starts-throttled`): nothing was created or started",
    headers: { "Retry-After": { description: "Seconds until a start is free", schema: { type: "integer" as const } } },
    content: { "application/problem+json": { schema: ProblemBody } },
  },
} as const;

export const conflict = {
  409: problem("The id is taken, or the change would leave a context without an admin"),
} as const;

/** A cancel or re-run refused by the status of what it names (a flow, a job outside flows). */
export const statusConflict = {
  409: problem(
    "Its status does not allow this (`flow_status`, or `job_status` for a job outside any flow, names it): a cancel of what already ended, a re-run of what did not fail, a delete of what still runs",
  ),
} as const;

/** The body of a cancel (a flow's, a job's): why, kept on what it ends. */
export const CancelBody = z.object({ reason: z.string().min(1).max(500).default("cancelled by an admin") }).strict();

/** Whether a cancelled flow unwinds: the compensations of its jobs that finished run (docs/flows.md). */
export const Compensate = z
  .boolean()
  .default(false)
  .describe(
    "Unwind the flow instead of ending it in error: the compensations of its jobs that finished run, in reverse order (docs/flows.md). A flow without compensations ends in error as with false.",
  );

/** The body of a flow's cancel: why, and whether it unwinds. */
export const FlowCancelBody = CancelBody.extend({ compensate: Compensate }).strict();

/** A JSON body of a response. */
export function json<T extends z.ZodType>(schema: T, description: string) {
  return { description, content: { "application/json": { schema } } };
}

/** A JSON body of a request. */
export function body<T extends z.ZodType>(schema: T) {
  return { body: { content: { "application/json": { schema } }, required: true } };
}

/** Security requirement naming the HTTP Message Signature scheme. */
export const signed = [{ httpSignature: [] }];

const { nameChars, labelFilters } = FLOW_IDENTITY_LIMITS;

/** Label filters as given (`label=key:value`, repeated), each checked, read into LabelFilter. */
const LabelFilters = z.union([z.string(), z.array(z.string())]).transform((given, ctx) => {
  const texts = typeof given === "string" ? [given] : given;
  if (texts.length > labelFilters) {
    ctx.addIssue({ code: "custom", message: `at most ${labelFilters} label filters` });
    return z.NEVER;
  }
  return texts.map((text) => {
    const filter = parseLabelFilter(text);
    if (!filter)
      ctx.addIssue({
        code: "custom",
        message: `not a label filter: ${JSON.stringify(text.slice(0, 80))} (key:value, or key alone for any value; keys are letters, digits and _ . / -)`,
      });
    return filter ?? { key: "" };
  });
});

/**
 * How a list of flows is narrowed and ordered (`GET …/flows`' query, `flow.list`'s params): a
 * status (its own index), a name's part and labels (looked for in a window of the index: see
 * docs/api.md, "Listing flows"), oldest or newest first.
 */
export const FlowListFilters = {
  status: FlowStatus.optional(),
  name: z
    .string()
    .min(1)
    .max(nameChars)
    .optional()
    .describe("Only flows whose name holds this text (case-insensitive)."),
  label: LabelFilters.optional().describe(
    `Only flows with this label: \`key:value\`, or \`key\` for any value; repeat it (at most ${labelFilters}) for flows with all of them.`,
  ),
  order: z.enum(["oldest", "newest"]).default("oldest").describe("By id: oldest first (the default) or newest first."),
};

/** The store's query from the filters as validated and a page's offset and limit. */
export function flowListQuery(q: {
  status?: FlowStatus | undefined;
  name?: string | undefined;
  label?: LabelFilter[] | undefined;
  order: "oldest" | "newest";
  offset: number;
  limit: number;
}): FlowListQuery {
  return {
    ...(q.status ? { status: q.status } : {}),
    ...(q.name !== undefined ? { name: q.name } : {}),
    ...(q.label ? { labels: q.label } : {}),
    newest: q.order === "newest",
    offset: q.offset,
    limit: q.limit,
  };
}
