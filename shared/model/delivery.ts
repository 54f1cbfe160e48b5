import { z } from "zod";
import { Id, Log, ResultMap } from "./common.js";
import { SIZE_LIMITS } from "./limits.js";
import { Message } from "./message.js";

/**
 * What a runner receives for one attempt of a job, pushed (a signed POST to its address) or
 * leased (pull): the message (its job embedded, with the environment to run it in), who it is
 * for, and the webhooks to report on (POST, signed by the runner, body `{ "attempt": n, ... }`).
 */
export const DeliveryPayload = z
  .object({
    message: Message,
    context_id: Id,
    /** 0 for a job outside any flow. */
    flow_id: z.int().min(0),
    job_id: Id,
    attempt: z.int().min(1),
    runner_id: Id,
    callbacks: z
      .object({ ack: z.url(), started: z.url(), heartbeat: z.url(), result: z.url(), logs: z.url() })
      .strict(),
  })
  .strict()
  .meta({ id: "Delivery" });
export type DeliveryPayload = z.infer<typeof DeliveryPayload>;

/**
 * What a push runner receives to stop an attempt (a flow was cancelled): `{ "cancel": {…} }`,
 * POSTed to its address and signed like a delivery. The runner stops the attempt the message id
 * and attempt name.
 */
export const CancelPayload = z
  .object({
    cancel: z.object({
      context_id: Id,
      /** 0 for a job outside any flow. */
      flow_id: z.int().min(0),
      job_id: Id,
      caller_id: Id,
      message_id: Id,
      attempt: z.int().min(1),
      reason: z.string().default("cancelled"),
    }),
  })
  .strict();
export type CancelPayload = z.infer<typeof CancelPayload>;

/** The most jobs one finished report may add to its flow (docs/runners.md, "Adding jobs"). */
export const ADDED_JOBS_MAX = 1000;

/**
 * How an attempt ended, told by the runner in its answer to the delivery instead of through the
 * `result` webhook: for a job that is done before the runner answers (a quick one), the
 * acknowledgement and the result in one message. The same fields as the webhook's body, without
 * `attempt` (the delivery names it). An answer that carries one is signed by the runner
 * (`shared/auth/answer.ts`); see docs/dispatch.md, "Results in the answer".
 */
export const DeliveryReport = z
  .object({
    status: z.enum(["finished", "error"]),
    result: ResultMap.default({}),
    error: z.string().max(SIZE_LIMITS.error).optional(),
    logs: z.array(Log).max(SIZE_LIMITS.logLinesPerReport).default([]),
    jobs: z
      .array(z.record(z.string(), z.unknown()))
      .max(ADDED_JOBS_MAX)
      .optional()
      .describe(
        "Jobs to add to the attempt's flow with its result (status finished): each as a flow file's job. Checked like a submission when the report is taken; a refusal ends the attempt in error saying why (docs/runners.md, \"Adding jobs\").",
      ),
  })
  .strict()
  .meta({ id: "DeliveryReport" });
export type DeliveryReport = z.infer<typeof DeliveryReport>;

/**
 * A push runner's answer (2xx) to one delivery, as far as the coordinator reads it: any body
 * acknowledges; one with a `report` also ends the attempt.
 */
export const DeliveryAnswer = z.looseObject({ report: DeliveryReport.optional() }).meta({ id: "DeliveryAnswer" });
export type DeliveryAnswer = z.infer<typeof DeliveryAnswer>;

/**
 * A push runner's answer (200) to several deliveries in one POST (`{ "deliveries": [...] }`, up
 * to its `deliveries_per_post`): one result per delivery, in their order,
 * each the status (and body) that a POST of that delivery alone would have been answered with:
 * a 2xx acknowledges that delivery (and its `report`, if any, ends the attempt), anything else
 * puts it back.
 */
export const DeliveryBatchAnswer = z
  .object({
    results: z.array(
      z.looseObject({
        status: z.int().min(100).max(599),
        detail: z.string().optional(),
        report: DeliveryReport.optional(),
      }),
    ),
  })
  .meta({ id: "DeliveryBatchAnswer" });
export type DeliveryBatchAnswer = z.infer<typeof DeliveryBatchAnswer>;
