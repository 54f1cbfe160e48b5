import type { ContentfulStatusCode } from "hono/utils/http-status";
import { PROBLEMS, problemUri, type ProblemType } from "./problems.js";

/** Extra members of a problem document, such as the field at fault. */
export type ProblemExtensions = Record<string, unknown>;

/**
 * An RFC 9457 problem: the one error type routes throw. Its kind comes from the catalog
 * (PROBLEMS), which gives its status and title; it knows how to become an
 * `application/problem+json` response, so handlers never build error bodies by hand.
 */
export class Problem extends Error {
  override name = "Problem";
  readonly status: ContentfulStatusCode;
  readonly title: string;

  constructor(
    readonly kind: ProblemType,
    readonly detail?: string,
    readonly extensions: ProblemExtensions = {},
    readonly headers: Record<string, string> = {},
  ) {
    const { status, title } = PROBLEMS[kind];
    super(detail ?? title);
    this.status = status;
    this.title = title;
  }

  /** The `type` URI: `/problems/<kind>`. */
  get type(): string {
    return problemUri(this.kind);
  }

  toJSON(): Record<string, unknown> {
    return {
      type: this.type,
      title: this.title,
      status: this.status,
      ...(this.detail !== undefined ? { detail: this.detail } : {}),
      ...this.extensions,
    };
  }

  toResponse(instance?: string): Response {
    const body = { ...this.toJSON(), ...(instance ? { instance } : {}) };
    const headers: Record<string, string> = { ...this.headers, "content-type": "application/problem+json" };
    if (this.status === 503) headers["retry-after"] = "5";
    return new Response(JSON.stringify(body), { status: this.status, headers });
  }
}

/** A problem as plain data, to cross a Durable Object RPC boundary (error classes do not). */
export interface ProblemData {
  kind: ProblemType;
  detail?: string;
  extensions: ProblemExtensions;
}

/** The answer of a Durable Object's RPC method: its value, or the problem it ran into. */
export type RpcResult<T> = { ok: T } | { problem: ProblemData };

export function problemData(problem: Problem): ProblemData {
  return {
    kind: problem.kind,
    ...(problem.detail !== undefined ? { detail: problem.detail } : {}),
    extensions: problem.extensions,
  };
}

/** Unwraps an RPC answer: its value, or its problem thrown again as a Problem. */
export function unwrap<T>(result: RpcResult<T>): T {
  if ("problem" in result) {
    const p = result.problem;
    throw new Problem(p.kind, p.detail, p.extensions);
  }
  return result.ok;
}
