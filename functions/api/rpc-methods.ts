import { z } from "zod";
import { FlowSubmission, RerunFields, runWithFrom } from "../../shared/flow/index.js";
import {
  Actor,
  ActorRegistration,
  Context,
  ContextCreation,
  ContextDetails,
  ContextLimitsUpdate,
  DeadLetter,
  EventInput,
  EventSent,
  Flow,
  FlowDag,
  FlowView,
  Id,
  JobView,
  Message,
  MessageSubmission,
  Runner,
  RunnerJob,
  RunnerRegistration,
  RunnerWithDispatch,
  ScheduleRun,
  ScheduleSummary,
  ScheduleView,
  WhoAmI,
} from "../../shared/model/index.js";
import { loadActor, registerActor, whoAmI } from "../service/actors.js";
import { createContext, listContexts, setLimits } from "../service/contexts.js";
import { contextDetails } from "../service/retention.js";
import { lifecycleMethods } from "./rpc-lifecycle.js";
import { templateMethods } from "./rpc-templates.js";
import { lazyTable, method } from "./rpc-method.js";
import { flowDag, listFlows, loadFlow, startFlow, submitFlow } from "../service/flows.js";
import { cancelJob, JobSubmission, loadJob, loadMessage, rerunJob, startJob, submitJob } from "../service/jobs.js";
import { inbox, sendMessage } from "../service/messages.js";
import { sendEvent } from "../service/events.js";
import {
  cancelFlow,
  deleteDeadLetter,
  listDeadLetters,
  loadDeadLetter,
  rerunFlow,
  setDispatch,
} from "../service/recovery.js";
import { createRunner, listRunners, loadRunner } from "../service/runners.js";
import {
  createSchedule,
  deleteSchedule,
  listSchedules,
  loadSchedule,
  ScheduleCreation,
  setSchedulePaused,
  triggerSchedule,
} from "../service/schedules.js";

import { Compensate, FlowListFilters, flowListQuery } from "./schemas.js";

export { lazyTable, method, type Method, type MethodTable } from "./rpc-method.js";

const ById = z.object({ id: Id }).strict();
const InContext = z.object({ context_id: Id, id: Id }).strict();
const ByCaller = z.object({ context_id: Id, caller_id: Id, id: Id }).strict();
/** Why a flow or job is cancelled, kept on what it ends. */
const Reason = z.string().min(1).max(500).default("cancelled by an admin");
const Paging = { offset: z.int().min(0).default(0), limit: z.int().min(1).max(500).default(50) };

/** A page of a listing: `next` is the offset of the following page, absent on the last one. */
function pageOf<T extends z.ZodType>(item: T, id: string) {
  return z
    .object({ items: z.array(item), total: z.int().min(0), next: z.int().min(0).optional() })
    .strict()
    .meta({ id });
}

const JobWithStatus = RunnerJob.safeExtend({ live: JobView.optional() }).meta({ id: "JobWithStatus" });
const DispatchState = z.object({ context_id: Id, paused: z.boolean() }).strict().meta({ id: "DispatchState" });

/**
 * herocoordinator's method names over the same service functions as the REST routes. Built on
 * the first call (and kept for the isolate), not at an isolate's start: each method's params are
 * a zod schema of their own, and an isolate that never answers JSON-RPC need not build them
 * (docs/architecture.md, "Cold start").
 */
export const rpcMethods = lazyTable(() => ({
  "actor.create": method({
    summary: "Register an actor: the call is signed by the new key itself (key:<pubkey>)",
    params: ActorRegistration,
    result: Actor,
    alsoFails: [409],
    run: async (call, p) => (await registerActor(call, p)).actor,
  }),
  "actor.load": method({
    summary: "Load an actor",
    params: ById,
    result: Actor,
    run: (call, p) => loadActor(call, p.id),
  }),
  "actor.whoami": method({
    summary: "Who the signing key belongs to: its actor, its runners (by context), or nobody; any signer may ask",
    params: z.object({}).strict(),
    result: WhoAmI,
    run: (call) => whoAmI(call),
  }),
  "context.create": method({
    summary: "Create a context; the caller becomes its admin",
    params: ContextCreation,
    result: Context,
    alsoFails: [409],
    run: (call, p) => createContext(call, p),
  }),
  "context.load": method({
    summary: "Load a context: its members, the retention in force and what it stores",
    params: ById,
    result: ContextDetails,
    run: (call, p) => contextDetails(call, p.id),
  }),
  "context.list": method({
    summary:
      "The contexts the caller is in, from a window of limit contexts at offset: a page may hold fewer (even none) while next says there are more",
    params: z.object(Paging).strict(),
    result: z
      .object({ items: z.array(Context), next: z.int().min(0).optional() })
      .strict()
      .meta({ id: "ContextList" }),
    run: (call, p) => listContexts(call, p.offset, p.limit),
  }),
  "context.pause": method({
    summary: "Hold all dispatch of a context until context.resume (admins)",
    params: ById,
    result: DispatchState,
    run: (call, p) => setDispatch(call, p.id, true),
  }),
  "context.resume": method({
    summary: "Resume dispatch of a context (admins)",
    params: ById,
    result: DispatchState,
    run: (call, p) => setDispatch(call, p.id, false),
  }),
  "context.limits": method({
    summary:
      "Set a context's max_inflight and flow_starts_per_minute (admins): a number sets one, null lifts it, an absent one stays",
    params: ContextLimitsUpdate.extend({ id: Id }).strict().meta({ id: "ContextLimitsParams" }),
    result: Context,
    run: (call, { id, ...limits }) => setLimits(call, id, limits),
  }),
  "runner.create": method({
    summary: "Register a runner in a context (admins)",
    params: RunnerRegistration.safeExtend({ context_id: Id }),
    result: Runner,
    alsoFails: [409],
    run: (call, { context_id, ...rest }) => createRunner(call, context_id, rest),
  }),
  "runner.load": method({
    summary: "Load a runner with how dispatch stands with it (readers, or the runner itself)",
    params: InContext,
    result: RunnerWithDispatch,
    run: (call, p) => loadRunner(call, p.context_id, p.id),
  }),
  "runner.list": method({
    summary: "List a context's runners (readers)",
    params: z.object({ context_id: Id, ...Paging }).strict(),
    result: pageOf(Runner, "RunnerPage"),
    run: (call, p) => listRunners(call, p.context_id, p.offset, p.limit),
  }),
  "flow.create": method({
    summary: "Submit a flow (admins); a repeated idempotency_key answers with the first flow",
    params: FlowSubmission.safeExtend({ context_id: Id, idempotency_key: z.string().min(1).max(128).optional() }),
    result: FlowView,
    alsoFails: [409, 422],
    run: async (call, { context_id, idempotency_key, ...submission }) =>
      (await submitFlow(call, context_id, submission, idempotency_key)).view,
  }),
  "flow.list": method({
    summary: "List a context's flows, optionally by status, name and labels, as GET …/flows does (readers)",
    params: z.object({ context_id: Id, ...FlowListFilters, ...Paging }).strict(),
    result: pageOf(Flow, "FlowPage"),
    run: (call, p) => listFlows(call, p.context_id, flowListQuery(p)),
  }),
  "flow.load": method({
    summary: "Load a flow with every job's live status (readers); subscribe with since = last_seq for what follows",
    params: InContext,
    result: FlowView,
    run: (call, p) => loadFlow(call, p.context_id, p.id),
  }),
  "event.send": method({
    summary:
      "Send an event to the context's waits (executors, or a runner of the context): every wait for its name and key finishes with its data; a repeated id is the same event",
    params: EventInput.safeExtend({ context_id: Id }),
    result: EventSent,
    alsoFails: [409],
    run: (call, { context_id, ...input }) => sendEvent(call, context_id, input),
  }),
  "flow.dag": method({
    summary: "A flow's DAG: nodes with statuses, edges from dependency to dependent (readers)",
    params: InContext,
    result: FlowDag,
    run: (call, p) => flowDag(call, p.context_id, p.id),
  }),
  "flow.start": method({
    summary: "Start a flow (admins); starting it again changes nothing",
    params: InContext,
    result: FlowView,
    run: (call, p) => startFlow(call, p.context_id, p.id),
  }),
  "flow.cancel": method({
    summary:
      "Cancel a flow (admins): nothing more is dispatched, runners of attempts in flight are told; one that already ended is a conflict naming its status; with compensate, a flow with compensations unwinds",
    params: InContext.safeExtend({ reason: Reason, compensate: Compensate }),
    result: FlowView,
    alsoFails: [409],
    run: (call, p) => cancelFlow(call, p.context_id, p.id, p.reason, p.compensate),
  }),
  "flow.rerun": method({
    summary:
      "Re-run a flow (admins): a failed one from its failed jobs (one whose unwinding failed, from its failed compensations); with from (and the run it replaces), one that ended from that job and everything downstream of it; env_vars go over the flow's env",
    params: InContext.safeExtend(RerunFields.shape).superRefine(runWithFrom),
    result: FlowView,
    alsoFails: [409],
    run: (call, { context_id, id, ...body }) => rerunFlow(call, context_id, id, body),
  }),
  "job.create": method({
    summary: "Create (and maybe start) a job outside any flow (admins)",
    params: JobSubmission.safeExtend({ context_id: Id }),
    result: JobWithStatus,
    alsoFails: [409],
    run: async (call, { context_id, ...input }) => (await submitJob(call, context_id, input)).job,
  }),
  "job.load": method({
    summary: "Load a job with its live status (readers)",
    params: ByCaller,
    result: JobWithStatus,
    run: (call, p) => loadJob(call, p.context_id, p.caller_id, p.id),
  }),
  "job.start": method({
    summary: "Start a job outside any flow (admins); starting it twice changes nothing",
    params: ByCaller,
    result: JobWithStatus,
    alsoFails: [409],
    run: (call, p) => startJob(call, p.context_id, p.caller_id, p.id),
  }),
  "job.cancel": method({
    summary:
      "Cancel a job outside any flow (admins), as a flow is cancelled; one that already ended is a conflict naming its status",
    params: ByCaller.safeExtend({ reason: Reason }),
    result: JobWithStatus,
    alsoFails: [409],
    run: (call, p) => cancelJob(call, p.context_id, p.caller_id, p.id, p.reason),
  }),
  "job.rerun": method({
    summary: "Re-run a failed job outside any flow with fresh retries (admins); any other status is a conflict",
    params: ByCaller,
    result: JobWithStatus,
    alsoFails: [409],
    run: (call, p) => rerunJob(call, p.context_id, p.caller_id, p.id),
  }),
  "message.create": method({
    summary: "Send a chat line or a mail to another member of the context (members)",
    params: MessageSubmission.safeExtend({ context_id: Id }),
    result: Message,
    run: (call, { context_id, ...input }) => sendMessage(call, context_id, input),
  }),
  "message.load": method({
    summary: "Load a message (readers)",
    params: ByCaller,
    result: Message,
    run: (call, p) => loadMessage(call, p.context_id, p.caller_id, p.id),
  }),
  "message.inbox": method({
    summary: "The caller's oldest messages in a context; pop takes them off the inbox (members)",
    params: z
      .object({ context_id: Id, max: z.int().min(1).max(100).default(20), pop: z.boolean().default(false) })
      .strict(),
    result: z.object({ messages: z.array(Message) }).strict(),
    run: async (call, p) => ({ messages: await inbox(call, p.context_id, p.max, p.pop) }),
  }),
  "deadletter.list": method({
    summary: "A context's dead letters, newest first (readers)",
    params: z.object({ context_id: Id, ...Paging }).strict(),
    result: pageOf(DeadLetter, "DeadLetterPage"),
    run: (call, p) => listDeadLetters(call, p.context_id, p.offset, p.limit),
  }),
  "deadletter.load": method({
    summary: "One dead letter (readers)",
    params: z.object({ context_id: Id, id: z.string().min(1).max(200) }).strict(),
    result: DeadLetter,
    run: (call, p) => loadDeadLetter(call, p.context_id, p.id),
  }),
  "deadletter.delete": method({
    summary: "Delete a dead letter (admins); idempotent: one already gone answers the same",
    params: z.object({ context_id: Id, id: z.string().min(1).max(200) }).strict(),
    result: z.object({ deleted: z.literal(true) }).strict(),
    run: async (call, p) => {
      await deleteDeadLetter(call, p.context_id, p.id);
      return { deleted: true };
    },
  }),
  "schedule.create": method({
    summary:
      "Create a schedule (admins): a flow template started on a cron expression (with timezone) or every interval_seconds, with overlap and catch-up policies",
    params: ScheduleCreation.safeExtend({ context_id: Id }),
    result: ScheduleView,
    run: async (call, { context_id, ...input }) => (await createSchedule(call, context_id, input)).view,
  }),
  "schedule.list": method({
    summary: "List a context's schedules by id, with their next and last fire (readers)",
    params: z.object({ context_id: Id, ...Paging }).strict(),
    result: pageOf(ScheduleSummary, "SchedulePage"),
    run: (call, p) => listSchedules(call, p.context_id, p.offset, p.limit),
  }),
  "schedule.get": method({
    summary: "Load a schedule with its last 20 runs, newest first (readers)",
    params: InContext,
    result: ScheduleView,
    run: (call, p) => loadSchedule(call, p.context_id, p.id),
  }),
  "schedule.pause": method({
    summary: "Pause a schedule (admins): nothing fires until schedule.resume",
    params: InContext,
    result: ScheduleView,
    run: (call, p) => setSchedulePaused(call, p.context_id, p.id, true),
  }),
  "schedule.resume": method({
    summary: "Resume a schedule (admins); fires that fell in the pause are not caught up",
    params: InContext,
    result: ScheduleView,
    run: (call, p) => setSchedulePaused(call, p.context_id, p.id, false),
  }),
  "schedule.trigger": method({
    summary: "Fire a schedule now through its overlap policy (admins); answers what became of the fire",
    params: InContext,
    result: ScheduleRun,
    run: (call, p) => triggerSchedule(call, p.context_id, p.id),
  }),
  "schedule.delete": method({
    summary: "Delete a schedule (admins): its alarm stops and its record goes; idempotent",
    params: InContext,
    result: z.object({ deleted: z.literal(true) }).strict(),
    run: async (call, p) => {
      await deleteSchedule(call, p.context_id, p.id);
      return { deleted: true };
    },
  }),
  ...lifecycleMethods(),
  ...templateMethods(),
}));
