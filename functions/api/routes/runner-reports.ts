import { createRoute, z, type OpenAPIHono } from "@hono/zod-openapi";
import { Problem } from "../../core/problem.js";
import { MAX_REPORTS, reportRunnerEvents, RunnerReports } from "../../service/runner-reports.js";
import { flowCall } from "../call.js";
import { body, json, named, PathId, ProblemBody, signed, signedErrors } from "../schemas.js";
import type { AppEnv } from "../app-env.js";

const ReportAnswer = named(
  z.union([
    z.object({
      outcome: z.enum(["applied", "duplicate"]),
      status: z.string().optional(),
      reason: z.string().optional(),
    }),
    z.object({ problem: ProblemBody }),
  ]),
  "RunnerReportAnswer",
);

const reports = createRoute({
  method: "post",
  path: "/v1/contexts/{contextId}/runners/{runnerId}/reports",
  tags: ["runner webhooks"],
  summary: "A runner reports on many jobs in one request",
  description: `Up to ${MAX_REPORTS} reports (\`event\`: ack, started, heartbeat, result or logs, with that webhook's \`body\`) on jobs of any flows (\`flow_id\`) or outside any flow (\`caller_id\`), each applied as its own webhook would apply it, in order for one job. Signed by the runner itself (keyid runner:<context>:<id>). Answers 200 with one answer per report, in order: its outcome (\`applied\`, \`duplicate\` when it was taken before), or the problem its webhook would have answered with (409 stale-attempt, 404 …); a report answered with a 5xx problem may be sent again. An invalid body is refused whole (400, \`field\` naming the report: \`body.reports.3.body.status\`).`,
  security: signed,
  request: {
    params: z.object({ contextId: PathId, runnerId: PathId }),
    ...body(RunnerReports),
  },
  responses: {
    200: json(z.object({ answers: z.array(ReportAnswer) }), "One answer per report, in order"),
    ...signedErrors,
  },
});

/** The batched runner webhook: many reports in one signed request. */
export function registerRunnerReportRoutes(app: OpenAPIHono<AppEnv>): void {
  app.openapi(reports, async (c) => {
    // Set by the signature check on this path, which only runners get past.
    const nonce = c.var.deferredNonce;
    if (!nonce) throw new Problem("forbidden", "only runners report on jobs", { needed: ["runner"] });
    const { contextId, runnerId } = c.req.valid("param");
    const answers = await reportRunnerEvents(flowCall(c), contextId, runnerId, c.req.valid("json").reports, nonce);
    return c.json({ answers }, 200);
  });
}
