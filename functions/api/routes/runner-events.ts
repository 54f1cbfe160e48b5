import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { DeliveryPayload } from "../../../shared/model/index.js";
import { leaseJobs, reportRunnerEvent, RUNNER_EVENTS, RunnerEventBodies, type RunnerEventName } from "../../service/runner-events.js";
import { recordPoisonPayload } from "../../service/recovery.js";
import { flowCall } from "../call.js";
import { invalidInput } from "../errors.js";
import { body, conflict, json, named, PathId, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../store.js";

const Answer = named(
  z.object({ outcome: z.enum(["applied", "duplicate"]), reason: z.string().optional(), status: z.string().optional() }),
  "RunnerEventAnswer",
);
const Delivery = named(DeliveryPayload, "Delivery");

const DESCRIPTIONS: Record<RunnerEventName, string> = {
  ack: "A pull runner acknowledges a leased job (push runners acknowledge with the 2xx of the delivery).",
  started: "The runner started the job.",
  heartbeat: "The job is still running.",
  result: "The job ended: `finished` with a result map, or `error` with a reason; logs may come along.",
  logs: "Log lines of the running job, appended to its message.",
};

function eventRoute(name: RunnerEventName, standalone: boolean) {
  return createRoute({
    method: "post",
    path: standalone ? `/v1/contexts/{contextId}/jobs/{callerId}/{jobId}/${name}` : `/v1/contexts/{contextId}/flows/{flowId}/jobs/{jobId}/${name}`,
    tags: ["runner webhooks"],
    summary: `Runner reports: ${name}`,
    description: `${DESCRIPTIONS[name]} Only from the runner the attempt was given to (keyid runner:<context>:<id>); idempotent: a repeated report answers \`duplicate\`, a report on an old attempt 409.`,
    security: signed,
    request: {
      params: standalone ? z.object({ contextId: PathId, callerId: PathId, jobId: PathId }) : z.object({ contextId: PathId, flowId: PathId, jobId: PathId }),
      ...body(RunnerEventBodies[name]),
    },
    responses: { 200: json(Answer, "Taken"), ...signedErrors, ...conflict },
  });
}

const lease = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/runners/{runnerId}/lease",
  tags: ["runner webhooks"],
  summary: "A pull runner takes jobs from its script types' queues",
  description: "Returns up to `max` deliveries (the same payload a push runner receives); acknowledge each through its `ack` callback.",
  security: signed,
  request: { params: z.object({ contextId: PathId, runnerId: PathId }), ...body(z.object({ max: z.int().min(1).max(100).default(1) }).strict()) },
  responses: { 200: json(z.object({ deliveries: z.array(Delivery) }), "Leased (possibly none)"), ...signedErrors, ...conflict },
});

/** The runner webhooks and the pull lease. */
export function registerRunnerEventRoutes(app: OpenAPIHono<AppEnv>): void {
  for (const name of RUNNER_EVENTS) {
    for (const standalone of [false, true]) {
      app.openapi(eventRoute(name, standalone), async (c) => {
        const call = flowCall(c);
        const params = c.req.valid("param") as { contextId: number; flowId?: number; callerId?: number; jobId: number };
        const scope = {
          prefix: call.store.keys.prefix,
          contextId: params.contextId,
          flowId: params.flowId ?? 0,
          ...(params.callerId !== undefined ? { job: { callerId: params.callerId, id: params.jobId } } : {}),
          origin: call.origin,
        };
        const nonce = c.var.deferredNonce;
        if (!nonce) throw new Error("runner webhooks need the deferred nonce");
        const answer = await reportRunnerEvent(call, scope, params.jobId, name, c.req.valid("json"), nonce);
        return c.json({ outcome: answer.outcome as "applied" | "duplicate", ...(answer.reason ? { reason: answer.reason } : {}), ...(answer.status ? { status: answer.status } : {}) }, 200);
      }, (result, c) => {
        if (result.success) return;
        const error = invalidInput(result.error, result.target === "json" ? "body" : result.target);
        // A runner's report that cannot be read is kept as a dead letter (a poison payload).
        if (result.target === "json") {
          const call = flowCall(c);
          const contextId = Number(c.req.param("contextId"));
          const jobId = Number(c.req.param("jobId"));
          const callerId = c.req.param("callerId");
          const scope = { prefix: call.store.keys.prefix, contextId, flowId: Number(c.req.param("flowId") ?? 0), ...(callerId ? { job: { callerId: Number(callerId), id: jobId } } : {}), origin: call.origin };
          if (Number.isInteger(contextId) && contextId > 0 && Number.isInteger(jobId) && jobId > 0) {
            c.executionCtx.waitUntil(recordPoisonPayload(call, scope, jobId, name, error.detail ?? "unreadable").catch(() => undefined));
          }
        }
        throw error;
      });
    }
  }
  app.openapi(lease, async (c) => {
    const { contextId, runnerId } = c.req.valid("param");
    return c.json({ deliveries: await leaseJobs(flowCall(c), contextId, runnerId, c.req.valid("json").max) }, 200);
  });
}
