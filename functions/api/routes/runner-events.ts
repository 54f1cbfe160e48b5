import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { DeliveryPayload } from "../../../shared/model/index.js";
import { RUNNER_EVENTS, type RunnerEventName } from "../../core/scopes.js";
import { keepRefusedReport } from "../../service/recovery.js";
import { leaseJobs, reportRunnerEvent, RunnerEventBodies } from "../../service/runner-events.js";
import { flowCall } from "../call.js";
import { registerRunnerReportRoutes } from "./runner-reports.js";
import { Problem } from "../../core/problem.js";
import { defaultHook, validationProblem } from "../errors.js";
import { body, conflict, json, named, PathId, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const Answer = named(
  z.object({ outcome: z.enum(["applied", "duplicate"]), reason: z.string().optional(), status: z.string().optional() }),
  "RunnerEventAnswer",
);

const FlowJobParams = z.object({ contextId: PathId, flowId: PathId, jobId: PathId });
const LoneJobParams = z.object({ contextId: PathId, callerId: PathId, jobId: PathId });

/** The path of a job's webhooks: of a job in a flow, or (standalone) of a job outside any flow. */
const webhookParams = (standalone: boolean) => (standalone ? LoneJobParams : FlowJobParams);

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
    path: standalone
      ? `/v1/contexts/{contextId}/jobs/{callerId}/{jobId}/${name}`
      : `/v1/contexts/{contextId}/flows/{flowId}/jobs/{jobId}/${name}`,
    tags: ["runner webhooks"],
    summary: `Runner reports: ${name}`,
    description: `${DESCRIPTIONS[name]} Only from the runner the attempt was given to (keyid runner:<context>:<id>); idempotent: a repeated report answers \`duplicate\`, a report on an old attempt 409.`,
    security: signed,
    request: {
      params: webhookParams(standalone),
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
  description:
    "Returns up to `max` deliveries (the same payload a push runner receives); acknowledge each through its `ack` callback.",
  security: signed,
  request: {
    params: z.object({ contextId: PathId, runnerId: PathId }),
    ...body(z.object({ max: z.int().min(1).max(100).default(1) }).strict()),
  },
  responses: {
    200: json(z.object({ deliveries: z.array(DeliveryPayload) }), "Leased (possibly none)"),
    ...signedErrors,
    ...conflict,
  },
});

/** The runner webhooks (one report each, and the batch of many) and the pull lease. */
export function registerRunnerEventRoutes(app: OpenAPIHono<AppEnv>): void {
  registerRunnerReportRoutes(app);
  for (const name of RUNNER_EVENTS) {
    for (const standalone of [false, true]) {
      app.openapi(
        eventRoute(name, standalone),
        async (c) => {
          // Set by the signature check on every webhook path, which only runners get past.
          const nonce = c.var.deferredNonce;
          if (!nonce) throw new Problem("forbidden", "only runners report on jobs", { needed: ["runner"] });
          const answer = await reportRunnerEvent(flowCall(c), c.req.valid("param"), name, c.req.valid("json"), nonce);
          return c.json(
            {
              outcome: answer.outcome as "applied" | "duplicate",
              ...(answer.reason ? { reason: answer.reason } : {}),
              ...(answer.status ? { status: answer.status } : {}),
            },
            200,
          );
        },
        (result, c) => {
          if (!result.success) {
            // The service keeps an unreadable report as a dead letter (a poison payload).
            const path = webhookParams(standalone).safeParse(c.req.param());
            keepRefusedReport(flowCall(c), {
              target: result.target,
              path: path.data,
              event: name,
              reason: validationProblem(result).detail ?? "unreadable",
            });
          }
          defaultHook(result);
        },
      );
    }
  }
  app.openapi(lease, async (c) => {
    const { contextId, runnerId } = c.req.valid("param");
    return c.json({ deliveries: await leaseJobs(flowCall(c), contextId, runnerId, c.req.valid("json").max) }, 200);
  });
}
