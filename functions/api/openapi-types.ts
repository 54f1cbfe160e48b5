/**
 * Gives every schema of the OpenAPI document a `type`, which zod leaves out where JSON Schema
 * does not need one: a union (`anyOf` of a URL and `""`), an enum or const alone, or any value
 * (`{}`, `z.unknown()`). The document is valid without them, but Scalar (the API reference at
 * `/docs/`) checks schemas reached through a `$ref` against a TypeBox model of its own that wants
 * a `type` on each, and logged "Expected union value" for every schema holding such a part
 * (Runner, FlowTemplate, RunnerReportAnswer, ScheduleSummary, …). The type added says no more
 * than the schema already did: a union's is its members' types, an enum's its values' types, and
 * a schema that allows any value lists every JSON type.
 */

/** Every JSON type, which is what a schema without constraints allows. */
const ANY = ["string", "number", "boolean", "object", "array", "null"];

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** The JSON type of a value, as a schema names it. */
function typeOfValue(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value === "object" ? "object" : typeof value;
}

/** Components by name, to follow `$ref`s while telling a union's types. */
type Components = Record<string, unknown>;

/**
 * The types a schema's values may have; undefined when that cannot be told (a `$ref` outside the
 * components, a cycle), in which case nothing is added.
 */
function typesOf(schema: unknown, components: Components, seen: Set<string>): string[] | undefined {
  if (!isObject(schema)) return schema === true ? ANY : [];
  if (typeof schema.$ref === "string") {
    const name = /^#\/components\/schemas\/(.+)$/.exec(schema.$ref)?.[1];
    if (name === undefined || seen.has(name)) return undefined;
    return typesOf(components[name], components, new Set([...seen, name]));
  }
  if (typeof schema.type === "string") return [schema.type];
  if (Array.isArray(schema.type)) return schema.type as string[];
  const members = [schema.anyOf, schema.oneOf].find(Array.isArray);
  if (members) {
    const types = new Set<string>();
    for (const member of members) {
      const own = typesOf(member, components, seen);
      if (own === undefined) return undefined;
      own.forEach((t) => types.add(t));
    }
    return [...types];
  }
  if (Array.isArray(schema.enum)) return [...new Set(schema.enum.map(typeOfValue))];
  if ("const" in schema) return [typeOfValue(schema.const)];
  if ("properties" in schema || "additionalProperties" in schema || "required" in schema) return ["object"];
  if ("items" in schema) return ["array"];
  return ANY;
}

/** The parts of a schema that are schemas themselves. */
function subschemas(schema: Json): unknown[] {
  const parts: unknown[] = [];
  for (const key of ["properties", "patternProperties", "$defs"]) {
    if (isObject(schema[key])) parts.push(...Object.values(schema[key]));
  }
  for (const key of ["items", "additionalProperties", "not", "contains"]) {
    if (isObject(schema[key])) parts.push(schema[key]);
  }
  for (const key of ["anyOf", "oneOf", "allOf", "prefixItems"]) {
    if (Array.isArray(schema[key])) parts.push(...schema[key]);
  }
  return parts;
}

/** Adds the `type` a schema and each of its parts leaves out (in place). */
function typeSchema(schema: unknown, components: Components): void {
  if (!isObject(schema)) return;
  if (schema.$ref === undefined && schema.type === undefined && !Array.isArray(schema.allOf)) {
    const types = typesOf(schema, components, new Set());
    if (types !== undefined && types.length > 0) schema.type = types.length === 1 ? types[0] : types;
  }
  for (const part of subschemas(schema)) typeSchema(part, components);
}

/**
 * Walks the document: the components' schemas, and every `schema` of a parameter, a header, a
 * request's or a response's content. Examples are left alone.
 */
function walk(node: unknown, components: Components): void {
  if (Array.isArray(node)) return node.forEach((item) => walk(item, components));
  if (!isObject(node)) return;
  for (const [key, value] of Object.entries(node)) {
    if (key === "example" || key === "examples") continue;
    if (key === "schema") typeSchema(value, components);
    else walk(value, components);
  }
}

/** The document with a `type` on every schema that can have one (changed in place, and returned). */
export function withSchemaTypes<T extends object>(document: T): T {
  const root = document as Json;
  const components = isObject(root.components) && isObject(root.components.schemas) ? root.components.schemas : {};
  for (const schema of Object.values(components)) typeSchema(schema, components);
  for (const [key, value] of Object.entries(root)) {
    if (key !== "components") walk(value, components);
    else if (isObject(value))
      for (const [part, content] of Object.entries(value)) if (part !== "schemas") walk(content, components);
  }
  return document;
}
