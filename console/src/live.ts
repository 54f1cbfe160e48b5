import type { ContextStreamEvent, FlowStreamEvent } from "../../shared/model/index.js";
import { sleep } from "../../shared/client/events.js";
import { describeError, isNoRoute, type Api } from "./api.js";
import { h } from "./dom.js";

/**
 * Keeping a page current: follow the coordinator's event stream for it, and when the coordinator
 * has no such stream (an older deployment answers 404 `no-route`), read the page again on an
 * interval instead. A small indicator tells the viewer which of the two is happening.
 */

export type LiveState = "live" | "reconnecting" | "polling" | "stopped";

/** The indicator: a dot and a word, announced politely to screen readers when it changes. */
export function liveIndicator(): { element: HTMLElement; set(state: LiveState, detail?: string): void } {
  const text = h("span", {}, "connecting");
  const element = h("span", { class: "live", "data-state": "connecting", role: "status", "aria-live": "polite" }, text);
  return {
    element,
    set(state, detail) {
      element.dataset.state = state;
      text.textContent = detail ? `${state}: ${detail}` : state;
    },
  };
}

export interface LiveOptions<T> {
  api: Api;
  /** The stream's path, e.g. `/v1/contexts/1/flows/2/events`. */
  path: string;
  label: string;
  /** Only events after this sequence number (from the view's `last_seq`). */
  since: number | undefined;
  check: (value: unknown) => T;
  onEvent: (event: T) => void;
  /** Reads the page's data again: the fallback when there is no stream. */
  reload: () => Promise<void>;
  /**
   * Read the page's data again each time the stream connects: for a stream that starts "from
   * now" (a context's), whatever happened between the last read and the connection.
   */
  reloadOnOpen?: boolean;
  pollMs: number;
  signal: AbortSignal;
  indicator: ReturnType<typeof liveIndicator>;
}

/** Follows the stream until `signal` aborts; falls back to polling `reload` without one. */
export async function keepLive<T extends { seq: number }>(options: LiveOptions<T>): Promise<void> {
  const { api, signal, indicator } = options;
  try {
    const events = api.follow(options.path, options.check, {
      label: options.label,
      ...(options.since !== undefined ? { since: options.since } : {}),
      signal,
      onDrop: (reason) => indicator.set("reconnecting", reason),
      onResume: () => indicator.set("live"),
      ...(options.reloadOnOpen ? { onOpen: () => void options.reload().catch(() => undefined) } : {}),
    });
    indicator.set("live");
    for await (const event of events) options.onEvent(event);
    indicator.set("stopped");
  } catch (error) {
    if (signal.aborted) return;
    if (!isNoRoute(error)) {
      indicator.set("polling", describeError(error));
    } else {
      indicator.set("polling", `every ${options.pollMs / 1000} s`);
    }
    await poll(options);
  }
}

async function poll<T>(options: LiveOptions<T>): Promise<void> {
  const { signal } = options;
  while (!signal.aborted) {
    await sleep(options.pollMs, signal);
    if (signal.aborted) return;
    await options.reload().catch(() => undefined); // the page shows its own errors
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null;

/** A flow event, checked for the fields the console reads. */
export function checkFlowEvent(value: unknown): FlowStreamEvent {
  if (!isObject(value) || typeof value.seq !== "number" || typeof value.type !== "string") {
    throw new Error("a flow event without seq or type");
  }
  if (typeof value.flow_id !== "number" || typeof value.status !== "string") {
    throw new Error(`flow event ${value.seq}: no flow_id or status`);
  }
  return value as unknown as FlowStreamEvent;
}

/** A context event, checked for the fields the console reads. */
export function checkContextEvent(value: unknown): ContextStreamEvent {
  if (!isObject(value) || typeof value.seq !== "number" || typeof value.type !== "string") {
    throw new Error("a context event without seq or type");
  }
  return value as unknown as ContextStreamEvent;
}
