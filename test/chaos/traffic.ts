import { ApiError, type CoordinatorClient } from "../../shared/client/index.js";
import type { EventSent, FlowView } from "../../shared/model/index.js";
import type { FlowPlan, WaitPlan } from "./shapes.js";

// The soak's event traffic: it watches the flows that have waits and sends their events as each
// wait's fate says (shapes.ts): once, twice, early, late, for the wrong key, or never. Every send
// and every try of it is recorded, for the invariants to judge against the flows' ends.

/** One try of a send: when it went and came back, and its answer, or why none came. */
export interface Try {
  startMs: number;
  endMs: number;
  answer?: EventSent;
  /** No answer: the status of a refusal, or the network error. */
  error?: string;
}

/** What one send was for: a waiting wait, before it could wait, after it ended, or a key no wait has. */
export type SendKind = "right" | "early" | "late" | "wrong";

/** An event sent (the same id tried again while no answer came), and for which wait. */
export interface Send {
  id: string;
  name: string;
  key: string;
  data: Record<string, string>;
  kind: SendKind;
  /** The wait's job name, and its flow's id (0 for an early send before the flow was submitted). */
  wait: string;
  flowId: number;
  tries: Try[];
}

/** A flow with waits the traffic is watching. */
interface Watched {
  flowId: number;
  waits: { plan: WaitPlan; acted: boolean; ended: boolean }[];
}

/** Tries per send while storage is away (503) or the Worker cannot be reached, with the same id. */
const TRIES = 8;

export class EventTraffic {
  readonly sends: Send[] = [];
  /** What the views showed that must not be: a wait or a sleep with a runner, a key other than planned. */
  readonly seen: string[] = [];
  /** Views read while watching. */
  looks = 0;
  private readonly watched: Watched[] = [];
  private readonly inFlight = new Set<Promise<void>>();
  private stopAt: number | undefined;

  constructor(
    private readonly client: CoordinatorClient,
    private readonly ctx: number,
  ) {}

  /** Before a flow is submitted: sends the events of its early waits whose keys are known already. */
  async beforeSubmit(plan: FlowPlan): Promise<void> {
    const early = plan.waits.filter((w) => w.fate === "early" && w.keyFrom !== "flow");
    await Promise.all(early.map((w) => this.send(w, 0, "early", `${w.job}.e1`)));
  }

  /** A flow was submitted: its waits' keys are known now; the early ones that were not sent are. */
  watch(plan: FlowPlan, flowId: number): void {
    if (plan.waits.length === 0) return;
    for (const w of plan.waits) w.key = w.key.replace("{FLOW}", String(flowId));
    for (const w of plan.waits)
      if (w.fate === "early" && w.keyFrom === "flow") this.spawn(this.send(w, flowId, "early", `${w.job}.e1`));
    this.watched.push({ flowId, waits: plan.waits.map((plan) => ({ plan, acted: false, ended: false })) });
  }

  /** Watches the flows, looking at each every ~400 ms, until `stop`; resolves once every send is done. */
  async run(): Promise<void> {
    while (!(this.stopAt !== undefined && (this.watched.length === 0 || Date.now() > this.stopAt))) {
      const flows = [...this.watched];
      for (let i = 0; i < flows.length; i += 8) {
        await Promise.all(
          flows.slice(i, i + 8).map(async (flow) => {
            const view = await this.client.loadFlow(this.ctx, flow.flowId).catch(() => undefined);
            if (!view) return;
            this.looks++;
            this.look(flow, view);
            if (flow.waits.every((w) => w.ended)) this.watched.splice(this.watched.indexOf(flow), 1);
          }),
        );
      }
      await sleep(400);
    }
    while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
  }

  /** Stops watching once no watched wait is left, or after `graceMs` (at once when the soak failed). */
  stop(graceMs: number): void {
    this.stopAt = Date.now() + graceMs;
  }

  /** What a view of a watched flow shows: a wait that runs gets its events, one that ended its late one. */
  private look(flow: Watched, view: FlowView): void {
    for (const job of view.jobs) {
      if (job.kind !== "script" && (job.runner_id !== undefined || job.delivery !== undefined))
        this.seen.push(`flow ${view.id} ${job.kind} ${job.key} shown with runner ${job.runner_id} ${job.delivery}`);
    }
    for (const w of flow.waits) {
      const job = view.jobs.find((j) => j.key === w.plan.job);
      if (!job || w.ended) continue;
      if (job.status === "started" && !w.acted) {
        w.acted = true;
        if (job.wait?.key !== w.plan.key)
          this.seen.push(`flow ${view.id} wait ${w.plan.job} waits for key ${job.wait?.key}, planned ${w.plan.key}`);
        this.spawn(this.act(w.plan, flow.flowId));
      } else if (job.status === "finished" || job.status === "error" || job.status === "skipped") {
        w.ended = true;
        if (w.plan.fate === "late") this.spawn(this.send(w.plan, flow.flowId, "late", `${w.plan.job}.late`));
      }
    }
  }

  /** Sends what a waiting wait's fate says. */
  private async act(w: WaitPlan, flowId: number): Promise<void> {
    const id = `${w.job}.e1`;
    switch (w.fate) {
      case "once":
        await sleep(w.delayMs);
        return this.send(w, flowId, "right", id);
      case "twice":
      case "two-ids": {
        const second = w.fate === "twice" ? id : `${w.job}.e2`;
        if (w.together) await Promise.all([this.send(w, flowId, "right", id), this.send(w, flowId, "right", second)]);
        else {
          await this.send(w, flowId, "right", id);
          await sleep(w.delayMs);
          await this.send(w, flowId, "right", second);
        }
        return;
      }
      case "early":
        // Sent again with its id once the wait runs, for some: the same event, offered again.
        if (w.together) await this.send(w, flowId, "right", id);
        return;
      case "wrong":
        return this.send(w, flowId, "wrong", `${w.job}.wrong`);
      case "wrong-then-right":
        await this.send(w, flowId, "wrong", `${w.job}.wrong`);
        await sleep(w.delayMs);
        return this.send(w, flowId, "right", id);
      default:
        return;
    }
  }

  /**
   * Sends one event for wait `w` and records it: its right key (or a wrong one), with `data`
   * saying the wait's decision (a second id says the other one). Tried again with the same id
   * while no answer comes (503, or the Worker unreachable), as a careful sender does.
   */
  private async send(w: WaitPlan, flowId: number, kind: SendKind, id: string): Promise<void> {
    const other = id.endsWith(".e2") ? { yes: "no", no: "yes" }[w.decision] : w.decision;
    const send: Send = {
      id,
      name: w.event,
      key: kind === "wrong" ? `${w.key}.wrong` : w.key,
      data: { decision: other },
      kind,
      wait: w.job,
      flowId,
      tries: [],
    };
    this.sends.push(send);
    for (let n = 0; n < TRIES; n++) {
      const startMs = Date.now();
      try {
        const answer = await this.client.sendEvent(this.ctx, { id, name: send.name, key: send.key, data: send.data });
        send.tries.push({ startMs, endMs: Date.now(), answer });
        return;
      } catch (error) {
        const status = error instanceof ApiError ? error.status : undefined;
        send.tries.push({ startMs, endMs: Date.now(), error: status ? String(status) : (error as Error).message });
        if (status !== undefined && status !== 503) return;
        await sleep(Math.min(4_000, 300 * 2 ** n));
      }
    }
  }

  private spawn(p: Promise<void>): void {
    const tracked = p.finally(() => this.inFlight.delete(tracked));
    this.inFlight.add(tracked);
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
