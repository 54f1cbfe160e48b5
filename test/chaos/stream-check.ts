import type { RequestSigner } from "../../shared/auth/index.js";
import type { ContextStreamEvent, FlowStreamEvent, FlowView } from "../../shared/model/index.js";
import { parsed, readSse, type SseEvent } from "../support/streams.js";

/** What the streams invariant found: whether it held, what was seen, and each flow's stream as read. */
export interface StreamCheck {
  held: boolean;
  detail: string;
  /** Every ended flow's stream, by flow id: the waits' invariants read their starts and ends there. */
  events: Map<number, FlowStreamEvent[]>;
}

const FLOW_END = new Set([
  "flow.finished",
  "flow.error",
  "flow.cancelled",
  "flow.compensated",
  "flow.compensation_failed",
]);

/** How long a flow's stream may take to tell what its flow's view tells, once the soak settled. */
const STREAM_SETTLE_MS = 10_000;

/**
 * After the soak: every ended flow's own stream is numbered 1..n without a gap and ends where the
 * flow ended (its last `flow.*` event has the flow's status, each job's last event the job's; a
 * job that joined the flow while it ran is told as added once, first of all its events), and
 * the context's stream tells each flow's end once, in each flow's order. Faults made commits'
 * outcomes unknown and restarted the Worker under the streams: this is where catching up shows.
 */
export async function checkStreams(
  baseUrl: string,
  signer: RequestSigner,
  ctx: number,
  ends: Map<number, FlowView>,
): Promise<StreamCheck> {
  const wrong: string[] = [];
  let events = 0;
  const streams = new Map<number, FlowStreamEvent[]>();
  const ids = [...ends.keys()];
  for (let i = 0; i < ids.length; i += 8) {
    await Promise.all(
      ids.slice(i, i + 8).map(async (id) => {
        const end = ends.get(id) as FlowView;
        const flow = await readFlowStream(`${baseUrl}/v1/contexts/${ctx}/flows/${id}/events`, signer, end);
        events += flow.length;
        streams.set(id, flow);
        if (flow.some((e, n) => e.seq !== n + 1)) wrong.push(`flow ${id}: its stream has a gap or a repeat`);
        const last = flow.filter((e) => e.type.startsWith("flow.")).at(-1);
        if (last?.status !== end.status) wrong.push(`flow ${id} ${end.status}, its stream says ${last?.type}`);
        for (const job of end.jobs) {
          const own = flow.filter((e) => e.job_id === job.id);
          const told = own.at(-1);
          if (told?.status !== job.status) wrong.push(`flow ${id} job ${job.key} ${job.status}, told ${told?.type}`);
          // A job that joined the flow is told as added once, before anything else of it.
          const joined = job.map_of !== undefined || job.added_by !== undefined;
          const added = own.filter((e) => e.type === "job.added").length;
          if (joined && (own[0]?.type !== "job.added" || added !== 1))
            wrong.push(
              `flow ${id} job ${job.key} joined it; its stream tells it ${added} times as added, first ${own[0]?.type}`,
            );
          if (!joined && added > 0) wrong.push(`flow ${id} job ${job.key} was submitted, told as added`);
        }
      }),
    );
  }
  // Read until it told every flow's end; one it never tells is named (the read stops after a minute).
  let told: SseEvent[] = [];
  const endsTold = (e: SseEvent[]) =>
    new Set(parsed<ContextStreamEvent>(e).flatMap((x) => ("flow_id" in x && FLOW_END.has(x.type) ? [x.flow_id] : [])));
  await readSse(`${baseUrl}/v1/contexts/${ctx}/events?since=0`, signer, (e) => {
    told = e;
    const ended = endsTold(e);
    return ids.every((id) => ended.has(id));
  }).catch(() => undefined);
  const feed = parsed<ContextStreamEvent>(told);
  const untold = ids.filter((id) => !endsTold(told).has(id));
  if (untold.length > 0) {
    // What the context has of each, against the flow's own stream: where the forwarding stopped.
    const of = (id: number) => {
      const end = ends.get(id) as FlowView;
      const own = (streams.get(id) ?? []).filter((e) => e.type.startsWith("flow.")).map((e) => `${e.seq} ${e.type}`);
      const fed = feed.flatMap((e) => ("flow_id" in e && e.flow_id === id ? [`${e.flow_seq} ${e.type}`] : []));
      const whose = end.parent ? `child of flow ${end.parent.flow_id}` : "top-level";
      return `${id} (${whose}, ${end.status} at ${end.ended_at}: its stream ${own.join(", ")}; the context's ${fed.join(", ") || "nothing"})`;
    };
    wrong.push(`the context's stream never told the end of flows ${untold.map(of).join("; ")}`);
  }
  if (feed.some((e, n) => e.seq !== n + 1)) wrong.push("the context's stream has a gap or a repeat");
  const lastOf = new Map<number, number>();
  for (const e of feed) {
    if (!("flow_id" in e)) continue;
    if ((lastOf.get(e.flow_id) ?? 0) >= e.flow_seq) wrong.push(`flow ${e.flow_id}: out of order in the context`);
    lastOf.set(e.flow_id, e.flow_seq);
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length === 0
        ? `${ids.length} flows' streams (${events} events) whole and ending as their flows did; the context's (${feed.length} events) in order`
        : wrong.slice(0, 5).join("; "),
    events: streams,
  };
}

/**
 * A flow's stream, read until it tells what `end` tells: its last `flow.*` event with the flow's
 * status and each job's last event with the job's. Not merely until its first end event: jobs
 * still in flight when a flow failed finish after its `flow.error`, and their events come after
 * it (reading stopped there, a stream sent in two pieces looked as if it lacked them). A stream
 * that never tells it is read until its end event, after STREAM_SETTLE_MS, for the report.
 */
async function readFlowStream(url: string, signer: RequestSigner, end: FlowView): Promise<FlowStreamEvent[]> {
  const tells = (events: FlowStreamEvent[]) =>
    events.filter((e) => e.type.startsWith("flow.")).at(-1)?.status === end.status &&
    end.jobs.every((job) => events.filter((e) => e.job_id === job.id).at(-1)?.status === job.status);
  try {
    const read = await readSse(url, signer, (e) => tells(parsed<FlowStreamEvent>(e)), { timeoutMs: STREAM_SETTLE_MS });
    return parsed<FlowStreamEvent>(read.events);
  } catch {
    const read = await readSse(url, signer, (e) => e.some((x) => FLOW_END.has(x.event ?? "")));
    return parsed<FlowStreamEvent>(read.events);
  }
}
