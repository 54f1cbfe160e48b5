import { z } from "zod";
import { Id, PublicKey, Timestamp, WebUrl } from "./common.js";
import { RunnerType, ScriptType } from "./enums.js";

/** The most deliveries one POST to a push runner may carry. */
export const MAX_DELIVERIES_PER_POST = 100;

/** How many deliveries a push runner takes in one POST. */
export const DeliveriesPerPost = z.int().min(1).max(MAX_DELIVERIES_PER_POST);

/**
 * A worker that executes jobs. Beyond the model's fields: the `context_id` it serves, `runner_type`, the `script_types` it
 * accepts and a `concurrency` limit, which the dispatcher uses to pick a runner. `address` is the
 * https URL jobs are pushed to; a runner without one only pulls (`local`). `deliveries_per_post`
 * is how many deliveries the coordinator may push to it in one POST (`{ "deliveries": [...] }`,
 * answered per delivery): 1, the default, for a runner that takes one delivery per request.
 */
export const Runner = z
  .object({
    id: Id,
    context_id: Id,
    pubkey: PublicKey,
    address: z.union([WebUrl, z.literal("")]),
    topic: z.string().min(1).max(256),
    local: z.boolean(),
    runner_type: RunnerType,
    script_types: z.array(ScriptType).min(1),
    concurrency: z.int().min(1).max(10_000),
    deliveries_per_post: DeliveriesPerPost.default(1),
    created_at: Timestamp,
    updated_at: Timestamp,
  })
  .strict()
  .meta({ id: "Runner" });
export type Runner = z.infer<typeof Runner>;

/** The model's default topic for a runner: `runner<id>`. */
export function defaultRunnerTopic(id: number): string {
  return `runner${id}`;
}

/**
 * How dispatch stands with a runner: the attempts it holds now (never more than its
 * concurrency), and, when deliveries to it failed, the last failure and when it is tried again
 * (epoch seconds).
 */
export const RunnerDispatch = z
  .object({
    in_flight: z.int().min(0),
    last_error: z.string().optional(),
    last_error_at: Timestamp.optional(),
    failures: z.int().min(0).optional(),
    retry_at: Timestamp.optional(),
  })
  .strict()
  .meta({ id: "RunnerDispatch" });
export type RunnerDispatch = z.infer<typeof RunnerDispatch>;

/** A runner as `GET …/runners/{r}` shows it: the record and how dispatch stands with it. */
export const RunnerWithDispatch = Runner.safeExtend({ dispatch: RunnerDispatch }).meta({ id: "RunnerWithDispatch" });
export type RunnerWithDispatch = z.infer<typeof RunnerWithDispatch>;
