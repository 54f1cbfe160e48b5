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
