import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { JobView, RunnerJob } from "../../../shared/model/index.js";
import { cancelJob, JobSubmission, loadJob, loadMessage, rerunJob, startJob, submitJob } from "../../service/jobs.js";
import { flowCall } from "../call.js";
import {
  body,
  CancelBody,
  conflict,
  json,
  named,
  PathId,
  schemas,
  signed,
  signedErrors,
  statusConflict,
} from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const contextParams = z.object({ contextId: PathId });
const jobParams = z.object({ contextId: PathId, callerId: PathId, jobId: PathId });
const messageParams = z.object({ contextId: PathId, callerId: PathId, messageId: PathId });
const JobWithStatus = named(RunnerJob.extend({ live: JobView.optional() }), "JobWithStatus");

const submit = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/jobs",
  tags: ["jobs"],
  summary: "Create (and maybe start) a job outside any flow (admins)",
  security: signed,
  request: { params: contextParams, ...body(named(JobSubmission, "JobSubmission")) },
  responses: {
    201: json(named(z.object({ job: JobWithStatus, view: schemas.FlowView }), "JobCreated"), "Created"),
    ...signedErrors,
    ...conflict,
  },
});

const load = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/jobs/{callerId}/{jobId}",
  tags: ["jobs"],
  summary: "Load a job with its live status (readers)",
  security: signed,
  request: { params: jobParams },
  responses: { 200: json(JobWithStatus, "The job"), ...signedErrors },
});

const start = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/jobs/{callerId}/{jobId}/start",
  tags: ["jobs"],
  summary: "Start a job outside any flow (admins)",
  security: signed,
  request: { params: jobParams },
  responses: { 200: json(JobWithStatus, "Started"), ...signedErrors, ...conflict },
});

const cancel = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/jobs/{callerId}/{jobId}/cancel",
  tags: ["jobs"],
  summary: "Cancel a job outside any flow (admins)",
  description:
    "As a flow's cancel: the job errors as cancelled, and the runner of an attempt in flight gets a signed cancel. A job that already ended (finished or error) is refused 409 naming its status in `job_status`, and nothing changes; so is a cancel repeated after it succeeded (a client's retry), which finds the job ended.",
  security: signed,
  request: { params: jobParams, ...body(CancelBody) },
  responses: { 200: json(JobWithStatus, "Cancelled"), ...signedErrors, ...statusConflict },
});

const rerun = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/jobs/{callerId}/{jobId}/rerun",
  tags: ["jobs"],
  summary: "Re-run a failed job outside any flow (admins)",
  description:
    "As a flow's re-run: the job runs again with fresh retries and fresh message ids. A job that did not fail is refused 409 naming its status in `job_status`.",
  security: signed,
  request: { params: jobParams },
  responses: { 200: json(JobWithStatus, "Running again"), ...signedErrors, ...statusConflict },
});

const message = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/messages/{callerId}/{messageId}",
  tags: ["messages"],
  summary: "Load a message (readers)",
  security: signed,
  request: { params: messageParams },
  responses: { 200: json(schemas.Message, "The message"), ...signedErrors },
});

/** Routes of jobs outside flows (create, load, start, cancel, re-run), and of messages. */
export function registerJobRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(submit, async (c) =>
    c.json(await submitJob(flowCall(c), c.req.valid("param").contextId, c.req.valid("json")), 201),
  );
  app.openapi(load, async (c) => {
    const { contextId, callerId, jobId } = c.req.valid("param");
    return c.json(await loadJob(flowCall(c), contextId, callerId, jobId), 200);
  });
  app.openapi(start, async (c) => {
    const { contextId, callerId, jobId } = c.req.valid("param");
    return c.json(await startJob(flowCall(c), contextId, callerId, jobId), 200);
  });
  app.openapi(cancel, async (c) => {
    const { contextId, callerId, jobId } = c.req.valid("param");
    return c.json(await cancelJob(flowCall(c), contextId, callerId, jobId, c.req.valid("json").reason), 200);
  });
  app.openapi(rerun, async (c) => {
    const { contextId, callerId, jobId } = c.req.valid("param");
    return c.json(await rerunJob(flowCall(c), contextId, callerId, jobId), 200);
  });
  app.openapi(message, async (c) => {
    const { contextId, callerId, messageId } = c.req.valid("param");
    return c.json(await loadMessage(flowCall(c), contextId, callerId, messageId), 200);
  });
}
