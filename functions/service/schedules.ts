import type { z } from "zod";
import { FlowSubmissionFields, resolveDag, withDeadlineChecks, withoutInputs } from "../../shared/flow/index.js";
import {
  scheduleCreation,
  UPCOMING_FIRES,
  type Schedule,
  type ScheduleRun,
  type ScheduleView,
} from "../../shared/model/index.js";
import { NotFoundError, type Page } from "../../shared/store/index.js";
import type { SchedulerState, ScheduleScope } from "../core/contracts.js";
import { fieldProblem } from "../core/errors.js";
import { Problem, unwrap } from "../core/problem.js";
import { cronProblem, nextFireAfter } from "../../shared/model/schedule-time.js";
import { schedulerStub } from "../core/stubs.js";
import { contextFor, requireActor } from "./access.js";
import type { FlowCall } from "./call.js";
import { checkPinnedRunners, requestDigest } from "./submission.js";
import { flowOf } from "./templates.js";

/**
 * A schedule's flow template: a flow submission without `id` (each fire makes a new flow) and
 * `start` (a fire always starts it).
 */
export const FlowTemplate = withoutInputs(
  withDeadlineChecks(FlowSubmissionFields.omit({ id: true, start: true })),
).meta({
  id: "FlowTemplate",
});

/** `POST /v1/contexts/{c}/schedules` (and `schedule.create`): the template, when, and the policies. */
export const ScheduleCreation = scheduleCreation(FlowTemplate, cronProblem).meta({ id: "ScheduleCreation" });
export type ScheduleCreation = z.output<typeof ScheduleCreation>;

/** The scope of a schedule's Scheduler object in this call's deployment. */
export function scheduleScope(call: FlowCall, contextId: number, scheduleId: number): ScheduleScope {
  return { prefix: call.store.keys.prefix, contextId, scheduleId, origin: call.origin };
}

/** A schedule as the API shows it: its record with what its object knows (next and last fire, runs). */
export function scheduleView(record: Schedule, state: SchedulerState): ScheduleView {
  const view: ScheduleView = {
    ...record,
    status: record.paused ? "paused" : "active",
    recent_runs: state.recent_runs,
    upcoming_fires: [],
    running_flow_ids: state.running_flow_ids,
  };
  if (state.next_fire_at !== undefined) view.next_fire_at = state.next_fire_at;
  else delete view.next_fire_at;
  if (!record.paused && view.next_fire_at !== undefined) view.upcoming_fires = upcomingFires(record, view.next_fire_at);
  if (state.last_fire_at !== undefined) view.last_fire_at = state.last_fire_at;
  if (state.buffered_fire_at !== undefined) view.buffered_fire_at = state.buffered_fire_at;
  return view;
}

/**
 * The next UPCOMING_FIRES fires from the one the object planned (epoch seconds), derived from the
 * spec as the object derives them (schedule-time.ts): pure arithmetic, no storage read.
 */
function upcomingFires(record: Schedule, next: number): number[] {
  const fires = [next];
  while (fires.length < UPCOMING_FIRES) {
    const after = nextFireAfter(record, (fires[fires.length - 1] as number) * 1000);
    if (after === undefined) break;
    fires.push(Math.floor(after / 1000));
  }
  return fires;
}

/**
 * A 400 when the template's jobs do not make a valid DAG, or pin runners the context does not
 * have; for a stored template, when it (or the version named) is not there, or the inputs do not
 * fit it (its latest version now: a later one may declare others, and its fire then fails).
 */
async function checkTemplate(call: FlowCall, contextId: number, input: ScheduleCreation): Promise<void> {
  const { template, from_template: ref } = input;
  if (ref) {
    const version = await call.store.templates.read(contextId, ref.name, ref.version).catch((error: unknown) => {
      if (!(error instanceof NotFoundError)) throw error;
      const field = ref.version !== undefined ? "version" : "name";
      throw fieldProblem([{ field: `body.from_template.${field}`, message: error.message }]);
    });
    flowOf(version, ref.inputs, "body.from_template");
    return;
  }
  if (!template) return;
  const check = resolveDag(template.jobs);
  if ("issues" in check)
    throw fieldProblem(check.issues.map((i) => ({ field: `body.template.${i.field}`, message: i.message })));
  await checkPinnedRunners(call, contextId, template.jobs, (i) => `template.jobs.${i}`);
}

/**
 * Creates a schedule (admins): checks the template as a submission would be checked, stores the
 * record, puts its first fire in the due set (so the sweep finds it even if its object cannot be
 * reached now), and has its Scheduler object set the alarm.
 */
export async function createSchedule(
  call: FlowCall,
  contextId: number,
  input: ScheduleCreation,
  idempotencyKey?: string,
): Promise<{ view: ScheduleView; created: boolean }> {
  const actorId = requireActor(call);
  await contextFor(call, contextId, "admin");
  await checkTemplate(call, contextId, input);
  const nowMs = Date.now();
  const now = Math.floor(nowMs / 1000);
  const digest = idempotencyKey ? await requestDigest(input) : undefined;
  const made = await call.store.schedules.create(
    {
      context_id: contextId,
      creator_id: actorId,
      ...(input.cron !== undefined ? { cron: input.cron, timezone: input.timezone ?? "UTC" } : {}),
      ...(input.interval_seconds !== undefined ? { interval_seconds: input.interval_seconds } : {}),
      overlap: input.overlap,
      catchup: input.catchup,
      ...(input.template ? { template: input.template as Record<string, unknown> } : {}),
      ...(input.from_template ? { from_template: input.from_template } : {}),
      paused: input.paused,
      ...(input.note !== undefined ? { note: input.note } : {}),
      anchor_ms: now * 1000,
      created_at: now,
      updated_at: now,
    },
    idempotencyKey && digest ? { key: idempotencyKey, digest } : undefined,
  );
  if (made.existing && made.digest !== digest) {
    throw new Problem(
      "idempotency-key-reused",
      `Idempotency-Key ${idempotencyKey} was used for another request (schedule ${made.id}); use a new key for a new request`,
      { field: "header.idempotency-key" },
    );
  }
  const record = made.existing ? await call.store.schedules.load(contextId, made.id) : made.schedule;
  // A retried create (its answer lost, maybe before the due time was written) writes the due
  // time again (a ZADD) and answers the schedule the key made, as it stands now.
  if (!record.paused) {
    const first = nextFireAfter(record, nowMs);
    if (first !== undefined) await call.store.schedules.setDue(contextId, record.id, first);
  }
  return { view: await syncView(call, record), created: !made.existing };
}

/** Has the schedule's object read its record again and answers the view. */
async function syncView(call: FlowCall, record: Schedule): Promise<ScheduleView> {
  const scope = scheduleScope(call, record.context_id, record.id);
  return scheduleView(record, unwrap(await schedulerStub(call.env, scope).sync(scope)));
}

/** A context's schedules by id (readers): records only, one Redis round trip per page, no object called. */
export async function listSchedules(
  call: FlowCall,
  contextId: number,
  offset: number,
  limit: number,
): Promise<Page<Schedule & { status: "active" | "paused" }>> {
  await contextFor(call, contextId, "read");
  const page = await call.store.schedules.list(contextId, offset, limit);
  return { ...page, items: page.items.map((s) => ({ ...s, status: s.paused ? "paused" : "active" })) };
}

/** One schedule with its recent runs (readers). */
export async function loadSchedule(call: FlowCall, contextId: number, scheduleId: number): Promise<ScheduleView> {
  await contextFor(call, contextId, "read");
  const record = await call.store.schedules.load(contextId, scheduleId);
  const scope = scheduleScope(call, contextId, scheduleId);
  return scheduleView(record, unwrap(await schedulerStub(call.env, scope).state(scope)));
}

/**
 * Pauses or resumes a schedule (admins). Pausing twice changes nothing; fires that fall while it
 * is paused are not caught up on resume (the catch-up policy is for the coordinator's downtime,
 * not the operator's pause).
 */
export async function setSchedulePaused(
  call: FlowCall,
  contextId: number,
  scheduleId: number,
  paused: boolean,
): Promise<ScheduleView> {
  await contextFor(call, contextId, "admin");
  await call.store.schedules.update(contextId, scheduleId, {
    set: { paused, updated_at: Math.floor(Date.now() / 1000) },
    ...(paused ? {} : { clear: ["paused_reason"] }),
  });
  return syncView(call, await call.store.schedules.load(contextId, scheduleId));
}

/**
 * Fires a schedule now (admins), through its overlap policy; answers what became of the fire (404
 * from the object when there is no such schedule).
 */
export async function triggerSchedule(call: FlowCall, contextId: number, scheduleId: number): Promise<ScheduleRun> {
  await contextFor(call, contextId, "admin");
  const scope = scheduleScope(call, contextId, scheduleId);
  return unwrap(await schedulerStub(call.env, scope).trigger(scope));
}

/**
 * Deletes a schedule (admins): the record first, so an alarm ringing meanwhile finds nothing to
 * fire, then the object's alarm and storage. Idempotent: deleting it again answers the same.
 * Flows it started are not touched.
 */
export async function deleteSchedule(call: FlowCall, contextId: number, scheduleId: number): Promise<void> {
  await contextFor(call, contextId, "admin");
  await call.store.schedules.remove(contextId, scheduleId);
  const scope = scheduleScope(call, contextId, scheduleId);
  unwrap(await schedulerStub(call.env, scope).remove(scope));
}
