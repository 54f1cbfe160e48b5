import type { CoordinatorClient } from "../shared/client/index.js";
import { labelsText, triggerText, type ContextStreamEvent, type JobStatus } from "../shared/model/index.js";
import type { Output } from "./output.js";
import { timestamp } from "./output.js";
import { rerunText } from "./flow-text.js";
import { EventFilter, isOpen, type WatchFilter } from "./context-filter.js";

/** `2/4 jobs ended` from a flow event's count of jobs per status (skipped ones ended too, and are said). */
function progressText(progress: Partial<Record<JobStatus, number>> | undefined): string {
  if (!progress) return "";
  const total = Object.values(progress).reduce((sum, n) => sum + n, 0);
  const skipped = progress.skipped ?? 0;
  const done = (progress.finished ?? 0) + (progress.error ?? 0) + skipped;
  return `  (${done}/${total} jobs ended${skipped > 0 ? `, ${skipped} not run` : ""})`;
}

/**
 * A flow's creation: `created (priority 5; schedule 3; env=prod)`, its priority unless the
 * default, what started it unless a submission did, and its labels.
 */
function createdText(event: Extract<ContextStreamEvent, { flow_seq: number }>): string {
  const trigger = event.trigger && event.trigger.kind !== "manual" ? triggerText(event.trigger) : "";
  const priority = event.priority !== undefined ? `priority ${event.priority}` : "";
  const about = [priority, trigger, labelsText(event.labels)].filter(Boolean).join("; ");
  return `created${about ? ` (${about})` : ""}`;
}

/** What happened to the flow, in plain words (docs/flows.md, "Statuses in plain words"). */
function what(event: Extract<ContextStreamEvent, { flow_seq: number }>): string {
  switch (event.type) {
    case "flow.created":
      return createdText(event);
    case "flow.cancelled":
      return `cancelled${event.reason ? `: ${event.reason.replace(/^cancelled:?\s*/, "")}` : ""}`;
    case "flow.rerun":
      return rerunText(event);
    case "flow.error":
      return `failed${event.error ? `: ${event.error}` : ""}`;
    case "flow.compensating":
      return `unwinds (compensating)${event.error ? `: ${event.error}` : ""}`;
    case "flow.compensation_failed":
      return `compensation failed${event.error ? `: ${event.error}` : ""}`;
    case "flow.paused":
      return `paused${event.reason ? `: ${event.reason}` : ""}`;
    default:
      return event.type.replace(/^flow\./, "");
  }
}

/** One line per event of a context's stream: its number (for --since), when, which flow, what. */
export function contextEventLine(event: ContextStreamEvent): string {
  const when = timestamp(Math.floor(event.at_ms / 1000));
  if (event.type === "stream.reset") {
    return `[${event.seq}] ${when} the context no longer keeps the events asked for: flowc flow list ${event.context_id} shows where its flows stand`;
  }
  const name = event.name !== undefined ? ` (${event.name})` : "";
  return `[${event.seq}] ${when} flow ${event.flow_id}${name} ${what(event)}${progressText(event.progress)}`;
}

/**
 * Follows a context's event stream, a line per event (one JSON object per line with --json),
 * until Ctrl-C, which ends it with exit 0 and says how to resume. A dropped connection is
 * reconnected where it left off.
 */
export async function watchContext(
  client: CoordinatorClient,
  contextId: number,
  since: number | undefined,
  out: Output,
  filter: WatchFilter = { labels: {} },
): Promise<number> {
  const shown = new EventFilter(filter, client, contextId);
  const stop = new AbortController();
  const onInterrupt = () => stop.abort();
  process.once("SIGINT", onInterrupt);
  let last = since;
  try {
    const only = isOpen(filter) ? "" : " (only the flows the filters let through)";
    let opened = false;
    const events = client.contextEvents(contextId, {
      ...(since !== undefined ? { since } : {}),
      signal: stop.signal,
      // Said once the stream is open, not before: from then on nothing that happens is missed.
      onOpen: () => {
        if (opened) return;
        opened = true;
        out.note(
          `watching context ${contextId}${since !== undefined ? ` after event ${since}` : ""}${only}; Ctrl-C stops`,
        );
      },
      onDrop: (reason) => out.note(`the event stream dropped (${reason}); reconnecting`),
      onResume: (after) => out.note(`reconnected; resuming after event ${after ?? 0}`),
    });
    for await (const event of events) {
      last = event.seq;
      if (await shown.shows(event)) out.record(event, contextEventLine(event));
    }
  } finally {
    process.off("SIGINT", onInterrupt);
  }
  const resume = last !== undefined ? ` --since ${last}` : "";
  out.note(`stopped watching context ${contextId} (flowc context watch ${contextId}${resume} goes on from here)`);
  return 0;
}
