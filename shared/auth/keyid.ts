import { isIdText, PublicKey } from "../model/common.js";

/**
 * Who signed a request, named by its `keyid`:
 * - `actor:<id>` a registered actor;
 * - `runner:<context>:<id>` a runner of a context;
 * - `key:<pubkey>` a bare key, only good for registering the actor that owns it.
 */
export type KeyId =
  { kind: "actor"; id: number } | { kind: "runner"; contextId: number; id: number } | { kind: "key"; pubkey: string };

export function actorKeyId(id: number): string {
  return `actor:${id}`;
}

export function runnerKeyId(contextId: number, id: number): string {
  return `runner:${contextId}:${id}`;
}

export function bareKeyId(pubkey: string): string {
  return `key:${pubkey}`;
}

/** Parses a keyid; null when it is none of the three forms. */
export function parseKeyId(keyid: string): KeyId | null {
  const [kind, a, b, ...rest] = keyid.split(":");
  if (rest.length > 0) return null;
  if (kind === "actor" && a !== undefined && isIdText(a) && b === undefined) return { kind, id: Number(a) };
  if (kind === "runner" && a !== undefined && b !== undefined && isIdText(a) && isIdText(b)) {
    return { kind, contextId: Number(a), id: Number(b) };
  }
  if (kind === "key" && a !== undefined && b === undefined && PublicKey.safeParse(a).success)
    return { kind, pubkey: a };
  return null;
}
