import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { ScheduleRun, ScheduleSummary, ScheduleView } from "../../../shared/model/index.js";
import {
  createSchedule,
  deleteSchedule,
  listSchedules,
  loadSchedule,
  ScheduleCreation,
  setSchedulePaused,
  triggerSchedule,
} from "../../service/schedules.js";
import { flowCall } from "../call.js";
import {
  body,
  IdempotencyHeader,
  idempotencyReused,
  json,
  pageOf,
  PageQuery,
  PathId,
  signed,
  signedErrors,
} from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const scheduleParams = z.object({ contextId: PathId, scheduleId: PathId });
const SchedulePage = pageOf(ScheduleSummary, "SchedulePage");

const create = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/schedules",
  tags: ["schedules"],
  summary: "Create a schedule: a flow started on a cron expression or a fixed interval (admins)",
  description: [
    "Each fire creates and starts a new flow from `template` (a flow submission without `id` and `start`), submitted as the caller, whose admin permission is checked again at every fire (lost: the fire fails and the schedule pauses, saying why).",
    "When: `cron` (5 fields, or 6 with seconds first; read in `timezone`, an IANA zone, default UTC) or `interval_seconds` (fires every so many seconds from the schedule's creation). Fire times come from the expression or the interval alone, never from when the previous fire ran, so they do not drift.",
    "`overlap` (a fire while a flow it started still runs): `skip` (default), `buffer_one` (start it when the running flows end; one waits at most, later fires are skipped), `allow_all`, `cancel_other` (cancel the running flows, then start).",
    "A repeated `Idempotency-Key` (kept a day) creates nothing and answers 200 with the schedule it created; the key with another request is refused, 422.",
    "`catchup` (fires missed while the coordinator was down): `skip` (default) or `run` the newest `max` of them. The template is checked as a submission is (400 naming `body.template.jobs.<i>…`); an invalid cron expression or time zone is a 400 naming `body.cron` or `body.timezone`.",
  ].join("\n\n"),
  security: signed,
  request: { params: contextParams, headers: IdempotencyHeader, ...body(ScheduleCreation) },
  responses: {
    201: json(ScheduleView, "Created"),
    200: json(ScheduleView, "The schedule this Idempotency-Key created before (a retried create)"),
    ...signedErrors,
    ...idempotencyReused,
  },
});

const list = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/schedules",
  tags: ["schedules"],
  summary: "List a context's schedules by id, with their next and last fire (readers)",
  security: signed,
  request: { params: contextParams, query: PageQuery },
  responses: { 200: json(SchedulePage, "A page of schedules"), ...signedErrors },
});

const load = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/schedules/{scheduleId}",
  tags: ["schedules"],
  summary: "Load a schedule with its last 20 runs (fire time, outcome, flow id), newest first (readers)",
  security: signed,
  request: { params: scheduleParams },
  responses: { 200: json(ScheduleView, "The schedule"), ...signedErrors },
});

const pause = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/schedules/{scheduleId}/pause",
  tags: ["schedules"],
  summary: "Pause a schedule (admins): nothing fires until resumed; pausing twice changes nothing",
  security: signed,
  request: { params: scheduleParams },
  responses: { 200: json(ScheduleView, "Paused"), ...signedErrors },
});

const resume = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/schedules/{scheduleId}/resume",
  tags: ["schedules"],
  summary:
    "Resume a schedule (admins): it fires from its next fire time on; fires that fell in the pause are not caught up",
  security: signed,
  request: { params: scheduleParams },
  responses: { 200: json(ScheduleView, "Resumed"), ...signedErrors },
});

const trigger = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/schedules/{scheduleId}/trigger",
  tags: ["schedules"],
  summary: "Fire a schedule now, paused or not (admins)",
  description:
    "The fire's time is this second; it goes through the overlap policy like any fire, and answers what became of it (`started` with the flow's id, `skipped`, `buffered`, `cancelled_other`, `failed`). A second trigger within the same second answers the first one's run.",
  security: signed,
  request: { params: scheduleParams },
  responses: { 200: json(ScheduleRun, "What became of the fire"), ...signedErrors },
});

const remove = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}/schedules/{scheduleId}",
  tags: ["schedules"],
  summary:
    "Delete a schedule (admins): its alarm stops and its record goes; flows it started are left as they are. Idempotent",
  security: signed,
  request: { params: scheduleParams },
  responses: { 204: { description: "Deleted (or already gone)" }, ...signedErrors },
});

/** Schedule routes of a context: create, list, load, pause, resume, trigger, delete. */
export function registerScheduleRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(create, async (c) => {
    const { view, created } = await createSchedule(
      flowCall(c),
      c.req.valid("param").contextId,
      c.req.valid("json"),
      c.req.valid("header")["idempotency-key"],
    );
    return created ? c.json(view, 201) : c.json(view, 200);
  });
  app.openapi(list, async (c) => {
    const { offset, limit } = c.req.valid("query");
    return c.json(await listSchedules(flowCall(c), c.req.valid("param").contextId, offset, limit), 200);
  });
  app.openapi(load, async (c) => {
    const { contextId, scheduleId } = c.req.valid("param");
    return c.json(await loadSchedule(flowCall(c), contextId, scheduleId), 200);
  });
  app.openapi(pause, async (c) => {
    const { contextId, scheduleId } = c.req.valid("param");
    return c.json(await setSchedulePaused(flowCall(c), contextId, scheduleId, true), 200);
  });
  app.openapi(resume, async (c) => {
    const { contextId, scheduleId } = c.req.valid("param");
    return c.json(await setSchedulePaused(flowCall(c), contextId, scheduleId, false), 200);
  });
  app.openapi(trigger, async (c) => {
    const { contextId, scheduleId } = c.req.valid("param");
    return c.json(await triggerSchedule(flowCall(c), contextId, scheduleId), 200);
  });
  app.openapi(remove, async (c) => {
    const { contextId, scheduleId } = c.req.valid("param");
    await deleteSchedule(flowCall(c), contextId, scheduleId);
    return c.body(null, 204);
  });
}
