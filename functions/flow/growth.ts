import { decide } from "../../shared/auth/index.js";
import {
  ENDED,
  growthNeeds,
  growthWanted,
  mapItemsOf,
  type FlowEvent,
  type FlowJobInput,
  type FlowState,
  type Transition,
} from "../../shared/flow/index.js";
import type { Store } from "../../shared/store/index.js";
import type { FlowScope } from "../core/scopes.js";
import type { Committed } from "./group-commit.js";

/** What growing the flow needs of the object around it (FlowObject implements it). */
export interface GrowthHost {
  store(): Store;
  scope(): FlowScope;
  /** The state in memory, if any. */
  current(): FlowState | null | undefined;
  /** The state, read back from storage when memory has none. */
  load(): Promise<FlowState | null>;
  enqueue(event: FlowEvent): Promise<Transition>;
}

/**
 * The shell's part of a flow that grows (the machine's is shared/flow/grow.ts): ids for the jobs
 * that join it, allocated before the event that adds them (ids never come back: a repeated or
 * refused report wastes some, never reuses one), and what only storage can tell about jobs a
 * result adds. A map's expansion is asked by the commit that started the map (its `expand`
 * effect) and, should that be lost (the object evicted, storage away), by its deadline: the
 * machine takes the first `expanded` and answers the next as a duplicate.
 */
export class Growth {
  /** Maps whose ids are being allocated, so the effect and the deadline do not both ask at once. */
  private readonly expanding = new Set<number>();

  constructor(private readonly host: GrowthHost) {}

  /** A durable batch started maps: each expands now (not awaited: it is an event of its own). */
  committed(batch: Committed): void {
    for (const step of batch.steps)
      for (const effect of step.effects)
        if (effect.type === "expand")
          void this.expand(effect.job, effect).catch((error: unknown) =>
            console.warn(`map ${effect.job} did not expand yet (its deadline asks again): ${(error as Error).message}`),
          );
  }

  /** Allocates a map's instances' ids and sends `expanded`; `needs` from the state when not given. */
  async expand(job: number, needs?: { jobs: number; messages: number }): Promise<void> {
    if (this.expanding.has(job)) return;
    this.expanding.add(job);
    try {
      const state = this.host.current();
      const map = state?.jobs.get(job);
      if (!state || !map || map.deadline?.kind !== "expand") return;
      const wanted = needs ?? expandNeeds(state, job);
      // A list the machine will refuse (it fails the map) needs no ids.
      const ids = wanted
        ? await this.host.store().messages.allocateGrowth(state.contextId, state.callerId, wanted.jobs, wanted.messages)
        : { job: 0, message: 0 };
      await this.host.enqueue({ type: "expanded", job, ids, at: Date.now() });
    } finally {
      this.expanding.delete(job);
    }
  }

  /**
   * A finished report that brings jobs, before the machine takes it: what needs storage is
   * checked (`refused` says why not) and their ids allocated (`ids`). Only for a report the
   * machine would take (the attempt current and running, the flow running, the jobs well
   * formed): a repeat of a report taken, or one it refuses anyway, costs nothing. The event
   * itself, at once, when there is nothing to do (so that reports queued together stay together).
   */
  prepare(event: FlowEvent): FlowEvent | Promise<FlowEvent> {
    if (event.type !== "finished" || !event.jobs?.length || event.ids || event.refused !== undefined) return event;
    return this.prepared(event);
  }

  private async prepared(event: Extract<FlowEvent, { type: "finished" }>): Promise<FlowEvent> {
    // Memory forgotten meanwhile (an unknown outcome): read back, as the event's batch would.
    const state = this.host.current() ?? (await this.host.load());
    const job = state?.jobs.get(event.job);
    if (!state || !job || job.attempt !== event.attempt || ENDED.has(job.status) || job.deadline?.kind === "retry")
      return event;
    const jobs = growthWanted(state, event);
    if (!jobs) return event;
    const refused = await this.refusal(state, jobs);
    if (refused) return { ...event, refused };
    const needs = growthNeeds(jobs);
    const ids = await this.host
      .store()
      .messages.allocateGrowth(state.contextId, state.callerId, needs.jobs, needs.messages);
    return { ...event, ids };
  }

  /**
   * What storage says against jobs being added: only what the flow's actor could submit may be
   * added, so the actor must still be an admin of the context (a flow outlives a permission),
   * and every runner a job is pinned to must be registered there. One read of the context, and
   * one of its runners when a job is pinned.
   */
  private async refusal(state: FlowState, jobs: FlowJobInput[]): Promise<string | undefined> {
    const store = this.host.store();
    const context = await store.contexts.load({ id: state.contextId });
    if (context.deleting_since !== undefined) return `context ${state.contextId} is being deleted`;
    if (!decide(context, state.callerId, "admin").allowed)
      return `the flow's actor ${state.callerId} may no longer submit flows in context ${state.contextId} (admins)`;
    const pinned = jobs.flatMap((job, i) => (job.runner_id !== undefined ? [{ i, id: job.runner_id }] : []));
    if (pinned.length === 0) return undefined;
    const runners = await store.runners.list({ context_id: state.contextId }, 0, 1000);
    const known = new Set(runners.items.map((r) => r.id));
    const missing = pinned.find((p) => !known.has(p.id));
    return missing
      ? `jobs.${missing.i}.runner_id: runner ${missing.id} is not registered in context ${state.contextId}`
      : undefined;
  }
}

/** What a map waiting to expand needs (its list read again, as the machine will), or undefined when it has none. */
function expandNeeds(state: FlowState, job: number): { jobs: number; messages: number } | undefined {
  const items = mapItemsOf(state, job);
  const map = state.jobs.get(job);
  return items && map ? growthNeeds(items.map(() => map.spec)) : undefined;
}
