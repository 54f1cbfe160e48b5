import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { RerunRequest } from "../../../shared/flow/index.js";
import { DeadLetter } from "../../../shared/model/index.js";
import {
  cancelFlow,
  deleteDeadLetter,
  listDeadLetters,
  loadDeadLetter,
  rerunFlow,
  setDispatch,
} from "../../service/recovery.js";
import { flowCall } from "../call.js";
import {
  body,
  FlowCancelBody,
  json,
  named,
  pageOf,
  PageQuery,
  PathId,
  schemas,
  signed,
  signedErrors,
  statusConflict,
} from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const letterParams = z.object({ contextId: PathId, id: z.string().min(1).max(200) });
const flowParams = z.object({ contextId: PathId, flowId: PathId });
const Dispatch = named(z.object({ context_id: z.int(), paused: z.boolean() }), "DispatchState");

const cancel = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/flows/{flowId}/cancel",
  tags: ["flows"],
  summary: "Cancel a flow (admins)",
  description:
    "Nothing more is dispatched; what has not ended errors as cancelled; the runners of attempts in flight get a signed cancel. A flow that already ended (finished, or error with no attempt of it still in flight) is refused 409 naming its status in `flow_status`, and nothing changes: so is a cancel repeated after it succeeded (a client's retry), which finds the flow ended. A failed flow whose other jobs still run can be cancelled: they are stopped. With `compensate: true` a flow whose jobs declare compensations unwinds (status `compensating`): the compensations of its jobs that finished run, in reverse order, and it ends `compensated` or `compensation_failed`; repeated while it unwinds, the same answer (200). A cancel without `compensate` of a flow that unwinds stops the unwinding: it ends `compensation_failed`.",
  security: signed,
  request: { params: flowParams, ...body(FlowCancelBody) },
  responses: { 200: json(schemas.FlowView, "Cancelled"), ...signedErrors, ...statusConflict },
});

const rerun = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/flows/{flowId}/rerun",
  tags: ["flows"],
  summary: "Re-run a flow: a failed one from its failed jobs, or one that ended from a job (admins)",
  description:
    "Without a body (or with `{}`), a failed flow runs again from its failed jobs (and those skipped because of them): finished jobs keep their results, each job run again gets fresh retries. A flow whose unwinding failed (`compensation_failed`) unwinds on: its failed compensations run again (status `compensating`); it is not re-run from a job. With `from`, a flow that ended (finished or error) runs again from that job: it and everything downstream of it, whatever their status, while what is upstream keeps its result (a failed flow's failures run again too). `env_vars` go over the flow's env from this run on. Each re-run is the flow's next `run`; `run` in the body says which run it replaces (required with `from`), and any other is refused 409, so a repeated request never runs the flow twice. Refused 409 with the flow's status in `flow_status` and its run in `run`: a flow that did not fail (without `from`), one that has not ended (with it), another run than `run`, a job to run again still in flight. An unknown `from` or an env past its limit is a 400 naming the field.",
  security: signed,
  request: { params: flowParams, body: { content: { "application/json": { schema: RerunRequest } }, required: false } },
  responses: { 200: json(schemas.FlowView, "Running again"), ...signedErrors, ...statusConflict },
});

const pause = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/pause",
  tags: ["contexts"],
  summary: "Pause dispatch in a context (admins)",
  description:
    "No runner is given work (push or pull) and no mail is relayed until resumed; delivery deadlines wait. Jobs already with runners go on.",
  security: signed,
  request: { params: contextParams },
  responses: { 200: json(Dispatch, "Paused"), ...signedErrors },
});

const resume = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/resume",
  tags: ["contexts"],
  summary: "Resume dispatch in a context (admins)",
  security: signed,
  request: { params: contextParams },
  responses: { 200: json(Dispatch, "Resumed"), ...signedErrors },
});

const list = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/deadletters",
  tags: ["dead letters"],
  summary: "Dead letters, newest first (readers)",
  description:
    "Jobs out of retries, messages no runner took, runners' reports that could not be read, refused messages: each with the reason and the attempts. A context keeps at most DEAD_LETTERS_MAX of them (10000 unless the deployment says otherwise; its `retention.dead_letters` overrides it): past it the oldest are dropped, counted in /metrics as coordinator_dead_letters_dropped_total.",
  security: signed,
  request: { params: contextParams, query: PageQuery },
  responses: { 200: json(pageOf(DeadLetter, "DeadLetterPage"), "A page of dead letters"), ...signedErrors },
});

const show = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/deadletters/{id}",
  tags: ["dead letters"],
  summary: "One dead letter (readers)",
  security: signed,
  request: { params: letterParams },
  responses: { 200: json(DeadLetter, "The dead letter"), ...signedErrors },
});

const remove = createRoute({
  method: "delete",
  path: "/v1/contexts/{contextId}/deadletters/{id}",
  tags: ["dead letters"],
  summary: "Delete a dead letter (admins), once what it was about is dealt with. Idempotent",
  description:
    "The letter and its index entry go. One already gone (deleted before, or dropped as the oldest past the context's cap) answers 204 as well, as deleting a schedule does.",
  security: signed,
  request: { params: letterParams },
  responses: { 204: { description: "Deleted (or already gone)" }, ...signedErrors },
});

/** Cancel, re-run, pause and resume, and the dead letters (list, load, delete). */
export function registerRecoveryRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(cancel, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    const { reason, compensate } = c.req.valid("json");
    return c.json(await cancelFlow(flowCall(c), contextId, flowId, reason, compensate), 200);
  });
  app.openapi(rerun, async (c) => {
    const { contextId, flowId } = c.req.valid("param");
    return c.json(await rerunFlow(flowCall(c), contextId, flowId, c.req.valid("json")), 200);
  });
  app.openapi(pause, async (c) => c.json(await setDispatch(flowCall(c), c.req.valid("param").contextId, true), 200));
  app.openapi(resume, async (c) => c.json(await setDispatch(flowCall(c), c.req.valid("param").contextId, false), 200));
  app.openapi(list, async (c) => {
    const { offset, limit } = c.req.valid("query");
    return c.json(await listDeadLetters(flowCall(c), c.req.valid("param").contextId, offset, limit), 200);
  });
  app.openapi(show, async (c) => {
    const { contextId, id } = c.req.valid("param");
    return c.json(await loadDeadLetter(flowCall(c), contextId, id), 200);
  });
  app.openapi(remove, async (c) => {
    const { contextId, id } = c.req.valid("param");
    await deleteDeadLetter(flowCall(c), contextId, id);
    return c.body(null, 204);
  });
}
