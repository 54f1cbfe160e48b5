import type { FlowEvent, FlowState, Transition } from "../../shared/flow/index.js";
import type { FlowChange } from "../../shared/flow/changes.js";
import { jsonBytes, type Log } from "../../shared/model/index.js";

/**
 * The most bytes of results and log lines one batch writes (a single event may bring more, up
 * to a request's body): with what its dispatches write, a commit stays far below storage's 10 MB
 * a call (docs/limits.md, "Worst cases").
 */
const BATCH_BYTES = 2 * 1024 * 1024;

/** A flow not in storage yet, stored by the batch of the event it came with (GroupCommit.createWith). */
export interface Unborn {
  state: FlowState;
  chosen: number[];
  created: FlowChange;
  /** Its incarnation token (kept in its record). */
  token: string;
}

/** An event waiting for the next batch, with log lines it brought and who waits for it. */
export interface Queued {
  event: FlowEvent;
  logs?: { job: number; lines: Log[] };
  unborn?: Unborn;
  resolve: (t: Transition) => void;
  reject: (error: unknown) => void;
}

/**
 * Takes the events the next batch writes off the front of `queue`: all of them, unless the
 * results, log lines and added jobs they bring pass BATCH_BYTES, in which case the rest wait for the next
 * batch (at least one goes). A batch is one script call, and storage takes at most 10 MB a call.
 */
export function nextBatch(queue: Queued[]): Queued[] {
  let bytes = 0;
  let count = 0;
  while (count < queue.length) {
    bytes += payloadBytes(queue[count] as Queued);
    if (count > 0 && bytes > BATCH_BYTES) break;
    count++;
  }
  return queue.splice(0, count);
}

/**
 * What a queued event brings to be written: its result, or its error, and its log lines; jobs a
 * result adds count twice (each one's record, and the message of its first attempt).
 */
function payloadBytes(item: Queued): number {
  const event = item.event;
  const added = event.type === "finished" && event.jobs ? 2 * jsonBytes(event.jobs) : 0;
  const carried =
    event.type === "finished" ? jsonBytes(event.result) : event.type === "failed" ? event.error.length : 0;
  return carried + added + (item.logs ? jsonBytes(item.logs.lines) : 0);
}
