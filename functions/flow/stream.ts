import { catchUpChanges, createdChange, type FlowChange, type Published } from "../../shared/flow/changes.js";
import type { FlowState } from "../../shared/flow/index.js";
import type { FlowStreamEvent, JobStatus } from "../../shared/model/index.js";
import type { FlowScope } from "../core/scopes.js";
import { closeQuietly } from "../core/sockets.js";

/** The tag of the subscribers' WebSockets: the only sockets a FlowCoordinator accepts. */
const SUBSCRIBER = "events";

/** The `since` a subscriber asked for, in the URL the Worker forwards: a sequence number. */
export function sinceOf(url: URL): number {
  const raw = url.searchParams.get("since") ?? "0";
  return /^\d{1,15}$/.test(raw) ? Number(raw) : 0;
}

/** Rows per INSERT: six parameters each, under SQLite's limit of bound parameters per statement (100 in Durable Objects). */
const ROWS_PER_INSERT = 16;

/**
 * The flow's event stream: every change, numbered, journalled in the object's SQLite storage,
 * and pushed to the WebSockets subscribed to it. The sockets are accepted with the hibernation
 * API, so a flow with watchers and nothing happening costs nothing: the object may be evicted
 * and the sockets stay open; the next change wakes it, and it sends to the sockets it finds.
 *
 * Events are appended once their transition is durable (after the commit), so a subscriber is
 * never told of a change that storage then did not keep. A commit whose outcome was unknown is
 * told later: when the state is read back, what differs from what was published is caught up.
 */
export class FlowStream {
  private ready = false;
  /** The newest event's number, and the newest `flow.*` event's: read once, then kept in step. */
  private newest: { seq: number; flowSeq: number } | undefined;

  constructor(private readonly ctx: DurableObjectState) {}

  /** Forgets what it knows of its tables (after they were wiped): they are made again on next use. */
  forget(): void {
    this.ready = false;
    this.newest = undefined;
  }

  private get sql(): SqlStorage {
    if (!this.ready) {
      this.ctx.storage.sql.exec(
        `CREATE TABLE IF NOT EXISTS stream (
          seq INTEGER PRIMARY KEY,
          job INTEGER,
          status TEXT NOT NULL,
          attempt INTEGER,
          flow_level INTEGER NOT NULL,
          body TEXT NOT NULL
        )`,
      );
      this.ready = true;
    }
    return this.ctx.storage.sql;
  }

  /** The sequence number of the latest event; 0 before the first. */
  lastSeq(): number {
    return this.latest().seq;
  }

  /** The sequence number of the latest `flow.*` event; 0 before the first. */
  lastFlowSeq(): number {
    return this.latest().flowSeq;
  }

  private latest(): { seq: number; flowSeq: number } {
    this.newest ??= this.sql
      .exec<{ seq: number | null; flowSeq: number | null }>(
        "SELECT MAX(seq) AS seq, MAX(CASE WHEN flow_level = 1 THEN seq END) AS flowSeq FROM stream",
      )
      .toArray()
      .map((row) => ({ seq: row.seq ?? 0, flowSeq: row.flowSeq ?? 0 }))[0];
    return this.newest ?? { seq: 0, flowSeq: 0 };
  }

  /**
   * Closes every subscriber's socket (1012, told why): the stream they follow is gone, and a
   * new one numbers its events from 1 again; a client subscribes again from the start.
   */
  close(reason: string): void {
    for (const socket of this.ctx.getWebSockets(SUBSCRIBER)) closeQuietly(socket, 1012, reason);
  }

  /** Numbers the changes, journals them, and pushes them to every subscriber. */
  append(scope: FlowScope, traceId: string, changes: FlowChange[]): FlowStreamEvent[] {
    if (changes.length === 0) return [];
    let seq = this.lastSeq();
    const events = changes.map((change): FlowStreamEvent => ({
      seq: ++seq,
      context_id: scope.contextId,
      flow_id: scope.flowId,
      trace_id: traceId,
      ...change,
    }));
    const latest = this.latest();
    const bodies = events.map((e) => JSON.stringify(e));
    // One INSERT of many rows: a statement per event was most of what the stream cost a busy flow.
    for (let i = 0; i < events.length; i += ROWS_PER_INSERT) {
      const rows = events.slice(i, i + ROWS_PER_INSERT);
      this.sql.exec(
        `INSERT INTO stream (seq, job, status, attempt, flow_level, body) VALUES ${rows.map(() => "(?, ?, ?, ?, ?, ?)").join(", ")}`,
        ...rows.flatMap((e, k) => [
          e.seq,
          e.job_id ?? null,
          e.status,
          e.attempt ?? null,
          e.type.startsWith("flow.") ? 1 : 0,
          bodies[i + k] as string,
        ]),
      );
    }
    for (const e of events) {
      latest.seq = e.seq;
      if (e.type.startsWith("flow.")) latest.flowSeq = e.seq;
    }
    this.push(bodies);
    return events;
  }

  /**
   * After the state was read back from storage: tells subscribers what changed meanwhile (the
   * flow's creation first, if even that was never told).
   */
  catchUp(scope: FlowScope, state: FlowState): void {
    // A flow whose creation was never told (made before streams existed, or its creation's
    // outcome was unknown): its first event is its creation, as it was then (not started).
    if (this.lastSeq() === 0)
      this.append(scope, state.traceId, [createdChange({ ...state, status: "dispatched" }, Date.now())]);
    const { jobs, flow } = this.published();
    this.append(scope, state.traceId, catchUpChanges(state, jobs, flow, Date.now()));
  }

  /** What subscribers were last told of each job and of the flow. */
  private published(): { jobs: Map<number, Published>; flow: FlowState["status"] | undefined } {
    const jobs = new Map<number, Published>();
    const rows = this.sql.exec<{ job: number; status: JobStatus; attempt: number }>(
      `SELECT job, status, attempt FROM stream
       WHERE seq IN (SELECT MAX(seq) FROM stream WHERE job IS NOT NULL GROUP BY job)`,
    );
    for (const row of rows) jobs.set(row.job, { status: row.status, attempt: row.attempt });
    const flow = this.sql
      .exec<{ status: FlowState["status"] }>("SELECT status FROM stream WHERE flow_level = 1 ORDER BY seq DESC LIMIT 1")
      .toArray()[0]?.status;
    return { jobs, flow };
  }

  /** The type of the latest `flow.*` event. */
  lastFlowEvent(): string | undefined {
    const rows = this.sql.exec<{ body: string }>(
      "SELECT body FROM stream WHERE flow_level = 1 ORDER BY seq DESC LIMIT 1",
    );
    const row = rows.toArray()[0];
    return row ? (JSON.parse(row.body) as FlowStreamEvent).type : undefined;
  }

  /** Events after `since`, in order; `flowLevel` keeps only the flow's own. */
  after(since: number, flowLevel = false, limit = 10_000): FlowStreamEvent[] {
    const rows = this.sql.exec<{ body: string }>(
      `SELECT body FROM stream WHERE seq > ? ${flowLevel ? "AND flow_level = 1" : ""} ORDER BY seq LIMIT ?`,
      since,
      limit,
    );
    return rows.toArray().map((row) => JSON.parse(row.body) as FlowStreamEvent);
  }

  /**
   * Accepts a subscriber's WebSocket (the Worker checked who may read the flow): replays what it
   * missed after `since`, then it receives every new event as it is appended. SQLite reads are
   * synchronous, so no event can slip in between the replay and the subscription.
   */
  subscribe(since: number): Response {
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server, [SUBSCRIBER]);
    let from = since;
    for (;;) {
      const page = this.after(from);
      for (const event of page) server.send(JSON.stringify(event));
      if (page.length < 10_000) break;
      from = (page.at(-1) as FlowStreamEvent).seq;
    }
    return new Response(null, { status: 101, webSocket: client });
  }

  private push(bodies: string[]): void {
    for (const socket of this.ctx.getWebSockets(SUBSCRIBER)) {
      try {
        for (const body of bodies) socket.send(body);
      } catch {
        // A socket that closed meanwhile: the runtime drops it from the list.
      }
    }
  }
}
