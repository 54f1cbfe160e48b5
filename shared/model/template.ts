import { z } from "zod";
import { Id, Timestamp } from "./common.js";
import { TEMPLATE_NAME } from "./template-name.js";

/*
 * Reusable flow templates (docs/templates.md): a flow file stored under a name as numbered,
 * immutable versions, started by name and version with inputs. The file's own schema (a flow
 * submission plus `inputs:`) is the flow layer's (shared/flow/template-file.ts); this is what
 * the records, the answers and the requests around it look like.
 */

/** What bounds a context's templates; docs/limits.md says why. */
export const TEMPLATE_LIMITS = {
  /** Templates one context holds: a PUT of one more name is refused (409). */
  perContext: 100,
  /** Versions kept per template: a PUT past it drops the oldest, in the same script. */
  versionsKept: 50,
  /** Inputs one template declares, and inputs one start gives. */
  inputs: 64,
  /** An input's description, and a template's, in characters. */
  description: 500,
} as const;

/** A template's name: what it is stored and started by (it is part of a Redis key). */
export const TemplateName = z
  .string()
  .regex(TEMPLATE_NAME, "a template's name: letters, digits, _ . -, starting with a letter or digit, at most 64");

/**
 * An input's name. Lower case, so that its environment variable (`INPUT_<NAME>`, upper-cased)
 * names it back: a `when` reads `inputs.<name>` from those variables.
 */
export const InputName = z
  .string()
  .regex(
    /^[a-z][a-z0-9_]{0,63}$/,
    "an input's name: lower-case letters, digits and _, starting with a letter, at most 64",
  );

/** What an input's value is: a text, a number, true or false, or any JSON value. */
export const InputType = z.enum(["string", "number", "boolean", "json"]);
export type InputType = z.infer<typeof InputType>;

/** Why `value` is not of `type`, or undefined when it is. */
export function inputTypeProblem(type: InputType, value: unknown): string | undefined {
  switch (type) {
    case "string":
      return typeof value === "string" ? undefined : `must be a string, not ${typeWord(value)}`;
    case "number":
      return typeof value === "number" && Number.isFinite(value)
        ? undefined
        : `must be a number, not ${typeWord(value)}`;
    case "boolean":
      return typeof value === "boolean" ? undefined : `must be true or false, not ${typeWord(value)}`;
    case "json":
      return value === undefined ? "must be a JSON value" : undefined;
  }
}

function typeWord(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "object") return "an object";
  if (typeof value === "string")
    return `the string ${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  return `${typeof value} ${String(value)}`;
}

/**
 * One input a template declares. Without a `default` it is required unless `required: false`
 * says otherwise (then a start may leave it out: its variable is not set); with one it is never
 * missing.
 */
export const InputDeclaration = z
  .object({
    type: InputType,
    default: z.unknown().optional().describe("The value when a start gives none, of the input's type"),
    description: z.string().max(TEMPLATE_LIMITS.description).optional(),
    required: z.boolean().optional().describe("Default: true without a default, false with one"),
  })
  .strict()
  .superRefine((input, ctx) => {
    if (input.default === undefined) return;
    const wrong = inputTypeProblem(input.type, input.default);
    if (wrong) ctx.addIssue({ code: "custom", path: ["default"], message: `the default ${wrong}` });
    if (input.required === true)
      ctx.addIssue({ code: "custom", path: ["required"], message: "an input with a default is never missing" });
  })
  .meta({ id: "InputDeclaration" });
export type InputDeclaration = z.infer<typeof InputDeclaration>;

/** Whether a start must give the input. */
export function inputRequired(input: InputDeclaration): boolean {
  return input.required ?? input.default === undefined;
}

/** A template's `inputs:`: declarations by name (a name at fault is named itself, not "an invalid key"). */
export const InputDeclarations = z.record(z.string(), InputDeclaration).superRefine(
  (inputs, ctx) => {
    const names = Object.keys(inputs);
    if (names.length > TEMPLATE_LIMITS.inputs)
      ctx.addIssue({ code: "custom", message: `a template declares at most ${TEMPLATE_LIMITS.inputs} inputs` });
    for (const name of names) {
      const wrong = InputName.safeParse(name).error?.issues[0]?.message;
      if (wrong) ctx.addIssue({ code: "custom", path: [name], message: wrong });
    }
  },
  // The names are checked even when a declaration is at fault too: each is told at once.
  { when: (payload) => typeof payload.value === "object" && payload.value !== null },
);

/** The inputs a start gives, by name: JSON values, checked against the declarations when the flow starts. */
export const InputValues = z
  .record(z.string().max(64), z.unknown())
  .refine((m) => Object.keys(m).length <= TEMPLATE_LIMITS.inputs, {
    message: `a start gives at most ${TEMPLATE_LIMITS.inputs} inputs`,
  })
  .describe("Values by input name, each of its declared type (a string, a number, a boolean, or any JSON value)");
export type InputValues = z.infer<typeof InputValues>;

/** Which template and version a flow was started from (kept on its record, shown on its view). */
export const FlowOrigin = z
  .object({ name: TemplateName, version: z.int().min(1) })
  .strict()
  .meta({ id: "FlowOrigin" });
export type FlowOrigin = z.infer<typeof FlowOrigin>;

/** What a stored version is besides its file: when and by whom it was put, its digest and size. */
export const TemplateVersionInfo = z
  .object({
    version: z.int().min(1),
    created_at: Timestamp,
    creator_id: Id,
    /** SHA-256 of the validated file as stored (hex): a PUT of the same file as the latest makes no version. */
    digest: z.string(),
    /** The stored file's size, bytes of JSON. */
    bytes: z.int().min(0),
    jobs: z.int().min(0),
    /** The names of the inputs it declares. */
    inputs: z.array(z.string()),
    description: z.string().optional(),
  })
  .strict()
  .meta({ id: "TemplateVersionInfo" });
export type TemplateVersionInfo = z.infer<typeof TemplateVersionInfo>;

/** A template as listings show it: its name, its newest and oldest kept versions. */
export const TemplateSummary = z
  .object({
    name: TemplateName,
    latest: z.int().min(1),
    oldest: z.int().min(1),
    /** How many versions are kept (latest − oldest + 1). */
    kept: z.int().min(1),
    description: z.string().optional(),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict()
  .meta({ id: "TemplateSummary" });
export type TemplateSummary = z.infer<typeof TemplateSummary>;

/** `GET …/templates/{name}`: the template and every version it keeps, newest first. */
export const TemplateView = TemplateSummary.safeExtend({ versions: z.array(TemplateVersionInfo) }).meta({
  id: "TemplateView",
});
export type TemplateView = z.infer<typeof TemplateView>;

/** One version with its file: the flow file as validated and stored (defaults filled in). */
export const TemplateVersion = TemplateVersionInfo.safeExtend({
  name: TemplateName,
  file: z.record(z.string(), z.unknown()),
}).meta({ id: "TemplateVersion" });
export type TemplateVersion = z.infer<typeof TemplateVersion>;

/** What a PUT made: the version (a new one, or the latest when the file is the same: `created: false`). */
export const TemplatePut = TemplateVersionInfo.safeExtend({ name: TemplateName, created: z.boolean() }).meta({
  id: "TemplatePut",
});
export type TemplatePut = z.infer<typeof TemplatePut>;

/** `POST …/templates/{name}/flows`: which version (default the latest), the inputs, and whether to start it. */
export const TemplateStart = z
  .object({
    version: z.int().min(1).optional().describe("The version to start (default: the latest)"),
    inputs: InputValues.default({}),
    start: z.boolean().default(true).describe("Start the flow at once (default true)"),
  })
  .strict()
  .meta({ id: "TemplateStart" });
export type TemplateStart = z.output<typeof TemplateStart>;
export type TemplateStartInput = z.input<typeof TemplateStart>;

/** A schedule's `from_template`: the template each fire starts, its version (default: the latest at the fire) and inputs. */
export const TemplateRef = z
  .object({
    name: TemplateName,
    version: z.int().min(1).optional(),
    inputs: InputValues.default({}),
  })
  .strict()
  .meta({ id: "TemplateRef" });
export type TemplateRef = z.output<typeof TemplateRef>;

/** A schedule's `from_template` as stored and shown: its inputs always there (the request's default filled in). */
export const StoredTemplateRef = z
  .object({ name: TemplateName, version: z.int().min(1).optional(), inputs: InputValues })
  .strict()
  .meta({ id: "StoredTemplateRef" });
