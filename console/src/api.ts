import { signRequest, type RequestSigner } from "../../shared/auth/sign.js";
import { ApiError, readAnswer } from "../../shared/client/errors.js";
import { followStream, type StreamOptions } from "../../shared/client/events.js";

/**
 * The coordinator's API as the page calls it: every request signed in the browser exactly as
 * `flowc` signs it (shared/auth's signRequest: RFC 9421, Ed25519 through WebCrypto, sig1 over
 * "@method" "@target-uri" "content-digest", with created, keyid, nonce and alg; Content-Digest on
 * bodies), answers read and problems thrown as ApiError by the shared client's own code. The
 * event streams are followed with the shared client's `followStream` (signed GETs, resumed with
 * Last-Event-ID after a drop). The console is served by the coordinator itself, so the API is at
 * the page's own origin.
 */
export class Api {
  private readonly base = location.origin;

  constructor(private readonly signer: RequestSigner) {}

  /** Who signs: `actor:<id>` (or `key:<pubkey>` while signing in). */
  get keyid(): string {
    return this.signer.keyid;
  }

  /** Sends a signed request; the raw response. */
  async send(method: string, path: string, body?: unknown): Promise<Response> {
    const request = new Request(`${this.base}${path}`, {
      method,
      ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
    });
    return fetch(await signRequest(request, this.signer));
  }

  /** A signed request; the parsed JSON answer (undefined for 204), a problem thrown as ApiError. */
  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    return (await readAnswer(await this.send(method, path, body))) as T;
  }

  get<T>(path: string): Promise<T> {
    return this.request<T>("GET", path);
  }

  post<T>(path: string, body?: unknown): Promise<T> {
    return this.request<T>("POST", path, body);
  }

  /**
   * Follows an event stream (`…/events`): yields each event once, in order, reconnecting after a
   * drop with Last-Event-ID; the page keeps retrying for as long as it is open. A 4xx (no such
   * route, no permission) is thrown as ApiError.
   */
  follow<T extends { seq: number }>(
    path: string,
    check: (value: unknown) => T,
    options: StreamOptions & { label: string },
  ): AsyncGenerator<T, void, undefined> {
    const source = {
      label: options.label,
      open: async (since: number | undefined, signal: AbortSignal) => {
        const headers: Record<string, string> = { accept: "text/event-stream" };
        if (since !== undefined) headers["last-event-id"] = String(since);
        const signed = await signRequest(new Request(`${this.base}${path}`, { headers }), this.signer);
        return fetch(signed, { signal, cache: "no-store" });
      },
    };
    // The console checks the fields it reads with a plain function, which keeps zod out of the page's bundle.
    return followStream(
      source,
      { parse: check },
      {
        ...options,
        reconnect: { outageMs: Number.POSITIVE_INFINITY, ...options.reconnect },
      },
    );
  }
}

export { ApiError, readAnswer };

/** What to tell a person about a failed call: the problem's detail, or its title. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) return error.problem.detail ?? `${error.status} ${error.problem.title}`;
  if (error instanceof Error) return error.message;
  return String(error);
}

/** An ApiError saying that the route does not exist (a coordinator without the event streams). */
export function isNoRoute(error: unknown): boolean {
  return error instanceof ApiError && error.status === 404 && error.code === "no-route";
}
