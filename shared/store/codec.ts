import type { z } from "zod";
import { CorruptRecordError, type FieldIssue } from "./errors.js";

/**
 * How one field is kept in a hash (docs/architecture.md): scalars as their text, booleans as `true` /
 * `false`, lists, maps, embedded jobs and logs as JSON.
 */
export type FieldKind = "int" | "str" | "bool" | "json";

/** The storage kind of every field of `T`, optional ones included. */
export type FieldKinds<T> = { readonly [K in keyof T]-?: FieldKind };

/** A model's schema plus how its fields are stored. */
export interface RecordCodec<T> {
  /** The model's name, for errors. */
  readonly name: string;
  readonly schema: z.ZodType<T>;
  readonly fields: FieldKinds<T>;
}

/** Encodes one field's value as hash text. */
export function encodeField(kind: FieldKind, value: unknown): string {
  switch (kind) {
    case "int":
    case "str":
      return String(value);
    case "bool":
      return value ? "true" : "false";
    case "json":
      return JSON.stringify(value);
  }
}

/** Encodes an object as hash field / value pairs; undefined fields are left out. */
export function encodeRecord<T>(codec: RecordCodec<T>, value: Partial<T>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [field, kind] of Object.entries(codec.fields) as [keyof T & string, FieldKind][]) {
    const v = value[field];
    if (v !== undefined) out[field] = encodeField(kind, v);
  }
  return out;
}

/** `encodeRecord` as the flat `field, value, …` list that HSET and the scripts take. */
export function encodePairs<T>(codec: RecordCodec<T>, value: Partial<T>): string[] {
  return Object.entries(encodeRecord(codec, value)).flat();
}

/**
 * Decodes a hash and parses it with the model's schema. Fields the model does not know are
 * ignored (a newer writer may have added them); a field that does not decode or parse makes
 * the whole record a CorruptRecordError naming the key and the fields.
 */
export function decodeRecord<T>(codec: RecordCodec<T>, key: string, hash: Record<string, unknown>): T {
  const issues: FieldIssue[] = [];
  const draft: Record<string, unknown> = {};
  for (const [field, kind] of Object.entries(codec.fields) as [string, FieldKind][]) {
    const raw = hash[field];
    if (raw === undefined || raw === null) continue;
    const decoded = decodeField(kind, String(raw));
    if (decoded.ok) draft[field] = decoded.value;
    else issues.push({ field, message: decoded.message });
  }
  if (issues.length > 0) throw new CorruptRecordError(key, issues);
  return parseStored(codec.schema, key, draft);
}

/**
 * Parses a value read from `key` with its schema; what does not parse is a CorruptRecordError
 * naming the fields (`whole` when the issue is the value itself).
 */
export function parseStored<T>(schema: z.ZodType<T>, key: string, value: unknown, whole = "(record)"): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  throw new CorruptRecordError(
    key,
    parsed.error.issues.map((issue) => ({ field: issue.path.join(".") || whole, message: issue.message })),
  );
}

/** Decodes a script's `{key, {field, value, …}, key, …}` reply (inboxes) into records. */
export function decodeKeyedHashes<T>(codec: RecordCodec<T>, reply: unknown): { key: string; record: T }[] {
  const out: { key: string; record: T }[] = [];
  if (!Array.isArray(reply)) return out;
  for (let i = 0; i + 1 < reply.length; i += 2) {
    const key = String(reply[i]);
    out.push({ key, record: decodeRecord(codec, key, pairsToObject(reply[i + 1] as string[])) });
  }
  return out;
}

type Decoded = { ok: true; value: unknown } | { ok: false; message: string };

function decodeField(kind: FieldKind, raw: string): Decoded {
  switch (kind) {
    case "str":
      return { ok: true, value: raw };
    case "int":
      return /^-?\d+$/.test(raw)
        ? { ok: true, value: Number(raw) }
        : { ok: false, message: `expected an integer, found ${JSON.stringify(raw.slice(0, 40))}` };
    case "bool":
      return raw === "true" || raw === "false"
        ? { ok: true, value: raw === "true" }
        : { ok: false, message: `expected true or false, found ${JSON.stringify(raw.slice(0, 40))}` };
    case "json":
      try {
        return { ok: true, value: JSON.parse(raw) };
      } catch {
        return { ok: false, message: "not valid JSON" };
      }
  }
}

/** Turns a flat HGETALL-style reply (`[field, value, field, value, ...]`) into an object. */
export function pairsToObject(pairs: readonly unknown[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < pairs.length; i += 2) out[String(pairs[i])] = String(pairs[i + 1]);
  return out;
}
