import { DurableObject } from "cloudflare:workers";
import type { ContextStreamEvent, FlowStreamEvent } from "../../shared/model/index.js";
import type { ContextFeedRpc } from "../core/contracts.js";
import type { Env } from "../core/env.js";
import type { DispatchScope } from "../core/scopes.js";
import { closeQuietly } from "../core/sockets.js";

/** The tag of the subscribers' WebSockets. */
const SUBSCRIBER = "events";

/**
 * How many events a context keeps for subscribers to resume from. The stream is for watching
 * (the console's list): one who was away longer gets `stream.reset` and reloads the list.
 */
const FEED_KEPT = 10_000;

/**
 * ContextFeed: the event stream of a whole context (one object per context), for the console's
 * list of flows and `flowc context watch`. Each flow's object forwards its `flow.*` events here
 * (created, started, paused, cancelled, re-run, finished, error); job events stay in the flows'
 * own streams, so a context with thousands of jobs in flight costs this object a few calls per
 * flow, not per job.
 *
 * Why an object of its own and not a fan-in at subscribe time (a subscriber to every flow of the
 * context): the set of flows changes while one watches, a new flow must show up without the
 * watcher knowing it exists, and one ordered sequence is what resuming needs. A flow forwards at
 * least once (it keeps its own cursor and retries from its alarm); the feed skips what it has by
 * the flow's sequence number, so each event appears once.
 */
export class ContextFeed extends DurableObject<Env> implements ContextFeedRpc {
  private ready = false;

  private get sql(): SqlStorage {
    if (!this.ready) {
      this.ctx.storage.sql.exec(`
        CREATE TABLE IF NOT EXISTS feed (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS flows (flow INTEGER PRIMARY KEY, last INTEGER NOT NULL, incarnation TEXT);
      `);
      this.ready = true;
    }
    return this.ctx.storage.sql;
  }

  /**
   * Per flow, the feed keeps the last event it took and the flow's incarnation: a batch of
   * another incarnation (a flow under an id given again, after Redis was flushed or the flow
   * deleted) starts from nothing, so its events, numbered from 1 again, are not skipped as seen.
   * A batch without an incarnation (its object has not learned it yet) keeps what is there.
   */
  async publish(scope: DispatchScope, flowId: number, events: FlowStreamEvent[], incarnation?: string): Promise<void> {
    const row = this.sql
      .exec<{ last: number; incarnation: string | null }>("SELECT last, incarnation FROM flows WHERE flow = ?", flowId)
      .toArray()[0];
    const last = row && (incarnation === undefined || row.incarnation === incarnation) ? row.last : 0;
    const fresh = events.filter((e) => e.seq > last).sort((a, b) => a.seq - b.seq);
    if (fresh.length === 0) return;
    // Only the oldest are ever deleted, so the newest kept number is the last one given.
    let seq = this.newest();
    const sent = fresh.map((event): ContextStreamEvent => {
      const entry: ContextStreamEvent = { ...event, context_id: scope.contextId, seq: ++seq, flow_seq: event.seq };
      this.sql.exec("INSERT INTO feed (seq, body) VALUES (?, ?)", seq, JSON.stringify(entry));
      return entry;
    });
    this.sql.exec(
      `INSERT INTO flows (flow, last, incarnation) VALUES (?, ?, ?) ON CONFLICT (flow)
       DO UPDATE SET last = excluded.last, incarnation = COALESCE(excluded.incarnation, flows.incarnation)`,
      flowId,
      (fresh.at(-1) as FlowStreamEvent).seq,
      incarnation ?? null,
    );
    this.sql.exec("DELETE FROM feed WHERE seq <= ?", seq - FEED_KEPT);
    for (const socket of this.ctx.getWebSockets(SUBSCRIBER)) {
      try {
        for (const entry of sent) socket.send(JSON.stringify(entry));
      } catch {
        // Closed meanwhile.
      }
    }
  }

  /** Forgets a removed flow's cursor: kept per flow, it would otherwise outlive the flow. */
  async forget(_scope: DispatchScope, flowId: number): Promise<void> {
    // No tables (the feed was never fed, or its context deleted meanwhile): nothing to forget,
    // and nothing is made for it.
    const sql = this.ctx.storage.sql;
    const made = sql.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'flows'").toArray();
    if (made.length > 0) sql.exec("DELETE FROM flows WHERE flow = ?", flowId);
  }

  /** Forgets the context's stream, which is being deleted: its subscribers are closed and its storage goes. */
  async purge(): Promise<void> {
    for (const socket of this.ctx.getWebSockets(SUBSCRIBER)) closeQuietly(socket, 1001, "the context was deleted");
    await this.ctx.storage.deleteAll();
    this.ready = false;
  }

  /**
   * A subscriber's WebSocket (the Worker checked who may read the context): what it missed
   * after `since`, then every new event. A `since` older than what is kept starts with
   * `stream.reset`.
   */
  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const raw = url.searchParams.get("since") ?? "";
    const contextId = Number(url.searchParams.get("context"));
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server, [SUBSCRIBER]);
    const newest = this.newest();
    // No `since`: only what happens from now on (a watcher wants the list as it changes).
    let from = /^\d{1,15}$/.test(raw) ? Number(raw) : newest;
    const oldest = this.sql.exec<{ seq: number | null }>("SELECT MIN(seq) AS seq FROM feed").one().seq;
    if (oldest !== null && from < oldest - 1) {
      const reset: ContextStreamEvent = {
        seq: oldest - 1,
        type: "stream.reset",
        at_ms: Date.now(),
        context_id: contextId,
        reason: `events after ${from} are no longer kept (the context keeps the last ${FEED_KEPT}): reload the flows`,
      };
      server.send(JSON.stringify(reset));
      from = oldest - 1;
    }
    // The Worker's SSE relay asks where the stream starts, so its client can resume from there.
    if (url.searchParams.get("cursor") === "1") server.send(JSON.stringify({ cursor: from }));
    for (const row of this.sql.exec<{ body: string }>("SELECT body FROM feed WHERE seq > ? ORDER BY seq", from))
      server.send(row.body);
    return new Response(null, { status: 101, webSocket: client });
  }

  /** Subscribers only listen: what one sends is ignored (the object is not kept awake for it). */
  override webSocketMessage(): void {}

  override webSocketClose(socket: WebSocket, code: number, reason: string): void {
    closeQuietly(socket, code, reason);
  }

  private newest(): number {
    return this.sql.exec<{ seq: number | null }>("SELECT MAX(seq) AS seq FROM feed").one().seq ?? 0;
  }
}
