import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { JobView, RunnerJob } from "../../../shared/model/index.js";
import { JobSubmission, loadJob, loadMessage, startJob, submitJob } from "../../service/jobs.js";
import { flowCall } from "../call.js";
import { body, conflict, json, named, PathId, schemas, signed, signedErrors } from "../schemas.js";
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

const message = createRoute({
  method: "get",
  path: "/v1/contexts/{contextId}/messages/{callerId}/{messageId}",
  tags: ["messages"],
  summary: "Load a message (readers)",
  security: signed,
  request: { params: messageParams },
  responses: { 200: json(schemas.Message, "The message"), ...signedErrors },
});

/** Routes of jobs outside flows, and of messages. */
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
  app.openapi(message, async (c) => {
    const { contextId, callerId, messageId } = c.req.valid("param");
    return c.json(await loadMessage(flowCall(c), contextId, callerId, messageId), 200);
  });
}
