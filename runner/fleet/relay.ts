import type { NatsConnection } from "@nats-io/nats-core";
import { jetstream, type ConsumerMessages, type JetStreamClient, type JsMsg } from "@nats-io/jetstream";
import { sleep } from "../../shared/client/index.js";
import type { RunnerLog } from "../job.js";
import type { ReportSink } from "../report-sink.js";
import { FleetEvent } from "./events.js";
import type { FleetMetrics } from "./metrics.js";
import { attemptId, type AttemptRef, type FleetNames } from "./names.js";

/** What the relay needs: the events consumer, where reports go, and whom to tell about a lost attempt. */
export interface RelayOptions {
  nc: NatsConnection;
  names: FleetNames;
  /** Reports go to the coordinator through this (one webhook each, or batched). */
  sink: ReportSink;
  /** How long an event may stay unacknowledged before JetStream gives it to another gateway (ms). */
  ackWaitMs: number;
  /** The coordinator says the attempt is not the runner's any more (409 stale-attempt, 403): stop it. */
  lost(ref: AttemptRef, why: string): void;
  /**
   * A result is on its way to the coordinator (`by` 1), or came back unanswered (-1): its job is
   * leaving the fleet. Counted before the answer, since the coordinator may push the next job on
   * the freed slot before its answer to this one is back.
   */
  settled(event: FleetEvent, by: 1 | -1): void;
  log: RunnerLog;
  metrics: FleetMetrics;
}

/** The running relay. */
export interface Relay {
  /**
   * Runs `task` in the attempt's queue: after what is queued for it, before its events that come
   * later (a pull gateway's acknowledgement goes first this way).
   */
  enqueue(ref: AttemptRef, task: () => Promise<unknown>): Promise<void>;
  /** Events taken from the stream and not yet answered. */
  inFlight(): number;
  /** Stops taking events; resolves once those taken were answered. */
  stop(): Promise<void>;
}

/** One round of retries at the coordinator (the reporter's backoff); rounds go on until it answers. */
const RELAY_RETRY_MS = 30_000;

/**
 * The gateway's outbox: takes the workers' events from the events stream and sends each to the
 * coordinator as the signed report it is, acknowledging it only after the coordinator answered —
 * 2xx (applied or `duplicate`) or a 4xx that ends it (409 for an attempt that is over). Events
 * of one attempt are sent one after another, in stream order (`started` before the result);
 * different attempts' events go at once. An event the coordinator does not answer is tried
 * again until it does (kept alive with in-progress acks meanwhile); a gateway that stops hands
 * it back, and one that dies leaves its unacknowledged events to come again after the ack wait. Nothing is lost either way, and the
 * coordinator applies a report once however often it comes.
 */
export function startRelay(options: RelayOptions): Relay {
  return new EventRelay(options);
}

/**
 * The relay's parts: per-attempt queues (one attempt's events in order), the loop reading the
 * events consumer (started by the constructor, again after any failure until stopped), and the
 * sending of one event with its acknowledgement.
 */
class EventRelay implements Relay {
  private readonly js: JetStreamClient;
  /** The tail of each attempt's queue: its next task runs after it. */
  private readonly queues = new Map<string, Promise<void>>();
  private taken = 0;
  private stopping = false;
  private messages: ConsumerMessages | undefined;
  private readonly loop: Promise<void>;

  constructor(private readonly options: RelayOptions) {
    this.js = jetstream(options.nc);
    this.loop = this.read();
  }

  enqueue(ref: AttemptRef, task: () => Promise<unknown>): Promise<void> {
    const key = attemptId(ref);
    const next = (this.queues.get(key) ?? Promise.resolve()).then(task).then(
      () => undefined,
      (error: Error) => this.options.log.warn(`relay of attempt ${key}: ${error.message}`),
    );
    this.queues.set(key, next);
    void next.finally(() => {
      if (this.queues.get(key) === next) this.queues.delete(key);
    });
    return next;
  }

  inFlight(): number {
    return this.taken;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.messages?.close();
    await this.loop;
    while (this.queues.size > 0) await Promise.all(this.queues.values());
  }

  /** Reads the events consumer until stopped; a failure (NATS away) is logged and reading begins again. */
  private async read(): Promise<void> {
    const { names, log } = this.options;
    while (!this.stopping) {
      try {
        const consumer = await this.js.consumers.get(names.eventsStream, names.gatewayConsumer);
        this.messages = await consumer.consume({ max_messages: 256 });
        for await (const m of this.messages) this.take(m);
      } catch (error) {
        if (this.stopping) break;
        log.warn(`relay: reading events failed: ${(error as Error).message}; trying again`);
      }
      if (!this.stopping) await sleep(1_000);
    }
  }

  /** One event message: parsed (or dropped, terminated), then queued behind its attempt's earlier events. */
  private take(m: JsMsg): void {
    let event: FleetEvent;
    try {
      event = FleetEvent.parse(m.json());
    } catch (error) {
      this.options.log.warn(`dropped event ${m.seq} on ${m.subject}: not a fleet event (${(error as Error).message})`);
      m.term();
      return;
    }
    // Kept alive from now: it may wait behind its attempt's earlier events.
    const keepAlive = setInterval(() => m.working(), this.options.ackWaitMs / 3);
    this.taken++;
    void this.enqueue(event.attempt, () =>
      this.relay(m, event).finally(() => {
        clearInterval(keepAlive);
        this.taken--;
      }),
    );
  }

  /**
   * Sends one event to the coordinator and settles its message by the answer: acknowledged once
   * answered (taken or refused for good), handed back when stopping with no answer.
   */
  private async relay(m: JsMsg, event: FleetEvent): Promise<void> {
    const { options } = this;
    options.settled(event, 1);
    // Not answered (the coordinator is away): tried again here, holding the attempt's queue, so
    // its later events do not overtake this one; handed back to the stream only when stopping.
    let outcome = await options.sink.send(event.target, event.event, event.body, RELAY_RETRY_MS);
    while (!outcome.ok && outcome.status === 0 && !this.stopping)
      outcome = await options.sink.send(event.target, event.event, event.body, RELAY_RETRY_MS);
    const counted = (how: "taken" | "retry" | "refused") =>
      options.metrics.count("fleet_reports_relayed_total", RELAYED_HELP, { event: event.event, outcome: how });
    if (outcome.ok) {
      m.ack();
      return counted("taken");
    }
    if (outcome.status === 0) {
      // Stopping with it unanswered: back to the stream, to come again.
      options.settled(event, -1);
      m.nak(2_000);
      return counted("retry");
    }
    m.ack();
    counted("refused");
    options.log.warn(
      `${event.event} of attempt ${attemptId(event.attempt)} refused by the coordinator: ${outcome.detail}`,
    );
    if (outcome.stop) options.lost(event.attempt, outcome.detail);
  }
}

const RELAYED_HELP = "Worker events relayed to the coordinator, by event and how it went (taken, refused, retry).";
