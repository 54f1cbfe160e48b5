import type { FlowStatus } from "../model/index.js";

/** Which page of a list to read: `offset` items skipped, at most `limit`. */
export interface PageQuery {
  offset?: number;
  limit?: number;
}

/**
 * What a list of flows is narrowed to: a status, a part of their name (case-insensitive), labels
 * (`key:value`, or `key` alone for any value: a flow must have all of them), oldest or newest
 * first. A page filtered by name or labels looks through a window of flows (docs/api.md): it may
 * hold fewer than `limit` while `next` goes on.
 */
export interface FlowListOptions extends PageQuery {
  status?: FlowStatus;
  name?: string;
  label?: string[];
  order?: "oldest" | "newest";
}

/** A list's query string (without `?`): a list is given repeated (`label=a&label=b`). */
export function searchOf(query: FlowListOptions): string {
  return new URLSearchParams(
    Object.entries(query).flatMap(([k, v]: [string, unknown]) =>
      v === undefined ? [] : Array.isArray(v) ? v.map((one) => [k, String(one)]) : [[k, String(v)]],
    ),
  ).toString();
}
