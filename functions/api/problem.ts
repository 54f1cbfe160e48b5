import type { ContentfulStatusCode } from "hono/utils/http-status";

/** Extra members of a problem document, such as the field at fault. */
export type ProblemExtensions = Record<string, unknown>;

/**
 * An RFC 9457 problem: the one error type routes throw. It knows how to become an
 * `application/problem+json` response, so handlers never build error bodies by hand.
 * `type` is a relative URI naming the kind of problem (`/problems/<slug>`).
 */
export class Problem extends Error {
  override name = "Problem";

  constructor(
    readonly status: ContentfulStatusCode,
    readonly slug: string,
    readonly title: string,
    readonly detail?: string,
    readonly extensions: ProblemExtensions = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(detail ?? title);
  }

  get type(): string {
    return `/problems/${this.slug}`;
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
  status: ContentfulStatusCode;
  slug: string;
  title: string;
  detail?: string;
  extensions: ProblemExtensions;
}

/** The answer of an RPC that may fail with a problem. */
export type Outcome<T> = { ok: T } | { problem: ProblemData };

export function problemData(problem: Problem): ProblemData {
  return { status: problem.status, slug: problem.slug, title: problem.title, ...(problem.detail !== undefined ? { detail: problem.detail } : {}), extensions: problem.extensions };
}

/** Unwraps an RPC answer: its value, or its problem thrown again as a Problem. */
export function unwrap<T>(outcome: Outcome<T>): T {
  if ("problem" in outcome) {
    const p = outcome.problem;
    throw new Problem(p.status, p.slug, p.title, p.detail, p.extensions);
  }
  return outcome.ok;
}
