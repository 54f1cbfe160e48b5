import type { CoordinatorClient } from "../shared/client/index.js";
import { FlowStatus, type ContextStreamEvent } from "../shared/model/index.js";
import { plainFlowStatus, type PlainStatus } from "../shared/model/plain-status.js";

/*
 * What `flowc context watch` shows of a context's stream: every flow's events, or only those of
 * flows whose name holds a text, that carry labels, or whose event leaves them in a status (in
 * plain words). The filters are the flow list's (`flow list --name --label --status`), applied to
 * the stream as it comes: nothing more is asked of the coordinator, but a flow's labels, which
 * only its `flow.created` event carries, are read once from its view for a flow created before
 * the watch began.
 */

/** The filters of a watch; empty: every event. */
export interface WatchFilter {
  /** Part of the flow's name, any case. */
  name?: string;
  /** Labels the flow must carry: a value, or undefined for any value of the key. */
  labels: Record<string, string | undefined>;
  /** The plain status the event leaves its flow in. */
  status?: PlainStatus;
}

/** Whether a filter lets every event through. */
export function isOpen(filter: WatchFilter): boolean {
  return filter.name === undefined && filter.status === undefined && Object.keys(filter.labels).length === 0;
}

/** The labels of `--label key=value` and `--label key` (any value), repeated. */
export function labelFilter(pairs: string[]): Record<string, string | undefined> {
  const labels: Record<string, string | undefined> = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at < 0) labels[pair] = undefined;
    else labels[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return labels;
}

type FlowEvent = Extract<ContextStreamEvent, { flow_seq: number }>;

/** The plain status a flow event leaves its flow in (a cancel's own event says cancelled). */
export function eventWord(event: FlowEvent): PlainStatus {
  if (event.type === "flow.cancelled") return "cancelled";
  // A flow event carries its flow's status (the stream's schema shares the field with job events).
  const status = FlowStatus.safeParse(event.status);
  return status.success ? plainFlowStatus({ status: status.data }).word : "running";
}

/** Decides which events of a context's stream a watch shows; remembers each flow's labels. */
export class EventFilter {
  private readonly labels = new Map<number, Record<string, string>>();

  constructor(
    private readonly filter: WatchFilter,
    private readonly client: CoordinatorClient,
    private readonly contextId: number,
  ) {}

  /** Whether to show the event (a reset always shows). */
  async shows(event: ContextStreamEvent): Promise<boolean> {
    if (event.type === "stream.reset" || isOpen(this.filter)) return true;
    const { name, status } = this.filter;
    if (name !== undefined && !(event.name ?? "").toLowerCase().includes(name.toLowerCase())) return false;
    if (status !== undefined && eventWord(event) !== status) return false;
    const wanted = Object.entries(this.filter.labels);
    if (wanted.length === 0) return true;
    const labels = await this.labelsOf(event);
    return wanted.every(([key, value]) => key in labels && (value === undefined || labels[key] === value));
  }

  /** The flow's labels: from its created event, else read once from its view (none if it is gone). */
  private async labelsOf(event: FlowEvent): Promise<Record<string, string>> {
    if (event.type === "flow.created") this.labels.set(event.flow_id, event.labels ?? {});
    let known = this.labels.get(event.flow_id);
    if (known === undefined) {
      const view = await this.client.loadFlow(this.contextId, event.flow_id).catch(() => undefined);
      known = view?.labels ?? {};
      this.labels.set(event.flow_id, known);
    }
    return known;
  }
}
