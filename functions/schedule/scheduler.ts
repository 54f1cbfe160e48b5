import { DurableObject } from "cloudflare:workers";
import type { Schedule, ScheduleRun } from "../../shared/model/index.js";
import { NotFoundError, type SchedulePatch, type Store, type StoredSchedule } from "../../shared/store/index.js";
import { readConfig } from "../core/config.js";
import type { SchedulerRpc, SchedulerState, ScheduleScope } from "../core/contracts.js";
import type { Env } from "../core/env.js";
import { toProblem } from "../core/errors.js";
import { Problem, problemData, type RpcResult } from "../core/problem.js";
import { nextFireAfter, planDue } from "../../shared/model/schedule-time.js";
import { bindScope, storeForPrefix } from "../core/store.js";
import { afterAnswer, type FlowCall } from "../service/call.js";
import { actOn, flowRuns, PermissionLost, startBuffered, type FireContext } from "./fire.js";
import { emptyMemory, recorded, remember, seconds, stateOf, type Fire, type Memory } from "./memory.js";

/** While a fire is buffered, how often the object looks whether the running flows ended (the bound on the buffered fire's delay). */
export const BUFFER_POLL_MS = 2_000;
/** Retry of fires that could not be acted on (storage or an object away): exponential from this, up to the cap. */
const RETRY_BASE_MS = 2_000;
const RETRY_CAP_MS = 60_000;

const iso = (ms: number) => new Date(ms).toISOString();

/**
 * Scheduler: one per schedule (docs/schedules.md), named `<prefix><context>:schedule:<id>`. Its
 * alarm is set to the schedule's next fire, computed from the cron expression or the interval's
 * anchor and never from when the alarm rang, so fires do not drift. When it rings the object
 * plans the fires that are due (the newest on time; missed ones by the catch-up policy), writes
 * them down as pending, and acts on each (fire.ts): overlap policy, then the template started as
 * a flow through the submission service, idempotent by schedule and fire time.
 *
 * Every entry point (alarm, the sweep's poke, trigger, sync, remove) runs one at a time, so two
 * of them never plan or act on the same fire together; a fire repeated anyway (an isolate lost
 * after the flow was created) creates no second flow: its Idempotency-Key answers the first.
 */
export class Scheduler extends DurableObject<Env> implements SchedulerRpc {
  private scope: ScheduleScope | undefined;
  private cached: Memory | undefined;
  private queue: Promise<unknown> = Promise.resolve();

  sync(scope: ScheduleScope): Promise<RpcResult<SchedulerState>> {
    return this.guard(scope, () => this.advance());
  }

  trigger(scope: ScheduleScope): Promise<RpcResult<ScheduleRun>> {
    return this.guard(scope, () => this.fireNow());
  }

  state(scope: ScheduleScope): Promise<RpcResult<SchedulerState>> {
    return this.guard(scope, async () => stateOf(await this.refreshed(await this.memory())));
  }

  poke(scope: ScheduleScope): Promise<RpcResult<null>> {
    return this.guard(scope, async () => {
      await this.advance();
      return null;
    });
  }

  remove(scope: ScheduleScope): Promise<RpcResult<null>> {
    return this.guard(scope, async () => {
      await this.forget();
      return null;
    });
  }

  override async alarm(): Promise<void> {
    this.scope ??= await this.ctx.storage.get<ScheduleScope>("scope");
    if (!this.scope) return;
    try {
      await this.serial(() => this.advance());
    } catch (error) {
      // Storage away before anything was planned: ring again soon (the sweep is the backstop).
      console.warn(`Scheduler ${this.scope.contextId}/${this.scope.scheduleId}: ${(error as Error).message}`);
      await this.ctx.storage.setAlarm(Date.now() + RETRY_BASE_MS * 2);
    }
  }

  /** Plans what is due, acts on pending fires, sets the alarm and publishes the next fire. */
  private async advance(known?: StoredSchedule): Promise<SchedulerState> {
    const scope = this.bound();
    const found = known ?? (await this.store().schedules.findStored(scope.contextId, scope.scheduleId));
    if (!found) {
      await this.forget();
      return stateOf(emptyMemory());
    }
    const record = found.record;
    const memory = await this.memoryOf(found);
    const now = Date.now();
    if (record.paused) memory.paused = true;
    else {
      if (memory.paused) {
        // Resumed: fires that fell in the pause are not owed (catch-up is for the coordinator's downtime).
        memory.lastMs = Math.max(memory.lastMs ?? 0, now);
        delete memory.paused;
      }
      this.plan(record, memory, now);
    }
    await this.save(memory);
    const retry = await this.work(record, memory);
    return this.settle(record, memory, now, retry);
  }

  /** Adds the due fires to the pending ones: the newest if on time, missed ones by the catch-up policy. */
  private plan(record: Schedule, memory: Memory, now: number): void {
    const plan = planDue(record, memory.lastMs ?? record.anchor_ms, now, record.catchup);
    if (plan.latest === undefined) return;
    if (plan.skipped > 0 && plan.skippedFrom !== undefined && plan.skippedTo !== undefined) {
      const { policy, max } = record.catchup;
      remember(memory, {
        fire_at: seconds(plan.skippedTo),
        trigger: "catchup",
        outcome: "skipped",
        reason: `${plan.skipped} missed fire${plan.skipped === 1 ? "" : "s"} from ${iso(plan.skippedFrom)} to ${iso(plan.skippedTo)} skipped (catch-up ${policy}${policy === "run" ? `, max ${max}` : ""})`,
        at: seconds(now),
      });
    }
    const fires: Fire[] = plan.catchup.map((at) => ({ at, trigger: "catchup" }));
    if (plan.current !== undefined) fires.push({ at: plan.current, trigger: "schedule" });
    memory.pending.push(...fires);
    memory.lastMs = plan.latest;
  }

  /** Acts on every pending fire in order, then on a buffered one; true when a retry is needed. */
  private async work(record: Schedule, memory: Memory): Promise<boolean> {
    const c: FireContext = { record, memory, call: this.callAs(record) };
    let fire: Fire | undefined;
    try {
      for (fire = memory.pending[0]; fire; fire = memory.pending[0]) {
        const run = recorded(memory, fire) ?? (await actOn(fire, c));
        if (!memory.runs.includes(run)) remember(memory, run);
        memory.pending.shift();
        await this.save(memory);
      }
      fire = memory.buffered ? { ...memory.buffered, trigger: "buffered" } : undefined;
      if (!record.paused) {
        const run = await startBuffered(c);
        if (run) remember(memory, run);
      }
      delete memory.failures;
      return false;
    } catch (error) {
      if (error instanceof PermissionLost && fire) {
        await this.pauseFor(record, memory, fire, error.message);
        return false;
      }
      memory.failures = (memory.failures ?? 0) + 1;
      console.warn(`Scheduler ${record.context_id}/${record.id}: ${(error as Error).message}; retrying`);
      return true;
    }
  }

  /** The creator may no longer start flows here: the fire fails, pending fires are dropped, the schedule pauses. */
  private async pauseFor(record: Schedule, memory: Memory, fire: Fire, why: string): Promise<void> {
    const reason = `paused: the creator (actor ${record.creator_id}) may no longer start flows here (${why})`;
    remember(memory, {
      fire_at: seconds(fire.at),
      trigger: fire.trigger,
      outcome: "failed",
      reason,
      at: seconds(Date.now()),
    });
    memory.pending = [];
    delete memory.buffered;
    memory.paused = true;
    record.paused = true;
    await this.store().schedules.update(record.context_id, record.id, {
      set: { paused: true, paused_reason: reason, updated_at: seconds(Date.now()) },
    });
  }

  /** Writes the memory, sets the alarm, and tells Redis the next and last fire (when they changed). */
  private async settle(record: Schedule, memory: Memory, now: number, retry: boolean): Promise<SchedulerState> {
    const next = record.paused ? undefined : nextFireAfter(record, Math.max(now, memory.lastMs ?? 0));
    if (next === undefined) delete memory.nextMs;
    else memory.nextMs = next;
    await this.save(memory);
    const backoff = Math.min(RETRY_CAP_MS, RETRY_BASE_MS * 2 ** Math.max(0, (memory.failures ?? 1) - 1));
    const times = [
      record.paused ? undefined : memory.nextMs,
      memory.buffered && !record.paused ? now + BUFFER_POLL_MS : undefined,
      retry ? now + backoff : undefined,
    ].filter((t): t is number => t !== undefined);
    if (times.length > 0) await this.ctx.storage.setAlarm(Math.min(...times));
    else await this.ctx.storage.deleteAlarm();
    const state = stateOf(memory);
    if (state.next_fire_at !== record.next_fire_at || state.last_fire_at !== record.last_fire_at) {
      const set: SchedulePatch["set"] = {};
      if (state.last_fire_at !== undefined) set.last_fire_at = state.last_fire_at;
      if (state.next_fire_at !== undefined) set.next_fire_at = state.next_fire_at;
      try {
        await this.store().schedules.update(record.context_id, record.id, {
          set,
          ...(state.next_fire_at === undefined ? { clear: ["next_fire_at"] } : {}),
        });
      } catch (error) {
        // Deleted while this fire ran: nothing more to fire.
        if (!(error instanceof NotFoundError)) throw error;
        await this.forget();
        return stateOf(emptyMemory());
      }
    }
    // The sweep's backstop: the next fire, or now while fires wait for a retry.
    const due = record.paused ? undefined : retry ? now : memory.nextMs;
    await this.store().schedules.setDue(record.context_id, record.id, due);
    return state;
  }

  /** A fire now (this second), through the overlap policy, paused or not; answers its run. */
  private async fireNow(): Promise<ScheduleRun> {
    const scope = this.bound();
    const found = await this.store().schedules.findStored(scope.contextId, scope.scheduleId);
    if (!found) {
      // Nothing to fire; and nothing of this call stays behind in the object's storage.
      await this.forget();
      throw new NotFoundError("schedule", `${scope.scheduleId} in context ${scope.contextId}`);
    }
    const memory = await this.memoryOf(found);
    // A manual fire still pending (its trigger was answered 503 and is being retried) is this
    // one: a retried trigger must not become a second run.
    const waiting = memory.pending.find((f) => f.trigger === "manual");
    const fire: Fire = waiting ?? { at: Math.floor(Date.now() / 1000) * 1000, trigger: "manual" };
    const done = recorded(memory, fire);
    if (done) return done;
    if (!waiting) {
      memory.pending.push(fire);
      await this.save(memory);
    }
    await this.advance(found);
    const run = recorded(memory, fire) ?? memory.runs.find((r) => r.fire_at === seconds(fire.at));
    if (!run) throw new Problem("storage-unavailable", "the fire could not be acted on yet; it is retried");
    return run;
  }

  /** A service call as the schedule's creator, whose permission the submission checks at every fire. */
  private callAs(record: Schedule): FlowCall {
    const scope = this.bound();
    return {
      store: this.store(),
      config: readConfig(this.env),
      principal: { kind: "actor", id: record.creator_id },
      request: new Request(`${scope.origin}/v1/contexts/${scope.contextId}/schedules/${scope.scheduleId}/fire`, {
        method: "POST",
      }),
      body: new Uint8Array(0),
      env: this.env,
      origin: scope.origin,
      later: afterAnswer((work) => this.ctx.waitUntil(work), "a schedule's work after its fire"),
    };
  }

  /** Forgets the schedule: no alarm, no storage, out of the due set. */
  private async forget(): Promise<void> {
    await this.ctx.storage.deleteAlarm();
    await this.ctx.storage.deleteAll();
    this.cached = undefined;
    const scope = this.bound();
    await this.store().schedules.setDue(scope.contextId, scope.scheduleId, undefined);
  }

  /**
   * The memory of the schedule `found`. A record under this id with another incarnation token
   * (Redis flushed or replaced, the id given again) is another schedule: it starts from an empty
   * memory, not with the old one's last fire (whose missed fires it would catch up), pending
   * fires, runs, or running flows (whose ids now name other flows).
   */
  private async memoryOf(found: StoredSchedule): Promise<Memory> {
    const memory = await this.memory();
    if (memory.incarnation === found.incarnation) return memory;
    const fresh: Memory = {
      ...emptyMemory(),
      ...(found.incarnation !== undefined ? { incarnation: found.incarnation } : {}),
    };
    await this.save(fresh);
    return fresh;
  }

  /**
   * The memory with the flows it counts as running looked at again (one Redis round trip), so a
   * view does not show flows that ended since the last fire (a paused schedule has none to
   * come). Storage away: the memory as it is.
   */
  private async refreshed(memory: Memory): Promise<Memory> {
    if (memory.running.length === 0) return memory;
    const scope = this.bound();
    const statuses = await this.store()
      .schedules.flowStatuses(scope.contextId, memory.running)
      .catch(() => undefined);
    if (!statuses) return memory;
    const running = memory.running.filter((_, i) => flowRuns(statuses[i]));
    if (running.length === memory.running.length) return memory;
    memory.running = running;
    await this.save(memory);
    return memory;
  }

  private async memory(): Promise<Memory> {
    this.cached ??= (await this.ctx.storage.get<Memory>("state")) ?? emptyMemory();
    return this.cached;
  }

  private async save(memory: Memory): Promise<void> {
    this.cached = memory;
    await this.ctx.storage.put("state", memory);
  }

  /** Runs `work` after everything called before it: one plan and one fire at a time. */
  private serial<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async guard<T>(scope: ScheduleScope, work: () => Promise<T>): Promise<RpcResult<T>> {
    try {
      this.scope = await bindScope(this.ctx.storage, scope);
      return { ok: await this.serial(work) };
    } catch (error) {
      const problem = toProblem(error);
      if (problem.status === 500) console.error("Scheduler:", error);
      return { problem: problemData(problem) };
    }
  }

  private bound(): ScheduleScope {
    if (!this.scope) throw new Error("the Scheduler was called before it knew its schedule");
    return this.scope;
  }

  private store(): Store {
    return storeForPrefix(this.env, this.bound().prefix);
  }
}
