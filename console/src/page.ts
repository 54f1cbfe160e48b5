import type { Api } from "./api.js";
import type { Session } from "./keystore.js";
import type { Route } from "./routes.js";

/** What a page is given: the signed API, who is signed in, where to draw, and when to stop. */
export interface PageContext {
  api: Api;
  session: Session;
  main: HTMLElement;
  /** Aborted when the viewer leaves the page: streams close, timers stop. */
  signal: AbortSignal;
}

/** A page on screen. `onRoute` may take a new route in place (true) instead of being drawn anew. */
export interface PageHandle {
  onRoute?(route: Route): boolean;
}

/** Runs `work` every `ms` until the page is left (for what has no event stream). */
export function every(ms: number, signal: AbortSignal, work: () => Promise<void>): void {
  const timer = setInterval(() => void work().catch(() => undefined), ms);
  signal.addEventListener("abort", () => clearInterval(timer), { once: true });
}

/** Calls `work` at most once per `ms`, the last call winning (many events, one reload). */
export function throttle(ms: number, work: () => Promise<void>): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return () => {
    timer ??= setTimeout(() => {
      timer = undefined;
      void work().catch(() => undefined);
    }, ms);
  };
}
