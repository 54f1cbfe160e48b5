import { z } from "zod";
import { EnvVarsInput, Id, Seconds } from "../model/common.js";
import { ScriptType } from "../model/enums.js";
import { FlowLabels, FlowName, FlowPriority, MaxParallel } from "../model/flow.js";
import { ChildFlowSpec } from "../model/child.js";
import { JOB_DEFAULTS, LONGEST_WAIT, MapSpec, Needs, WaitSpec } from "../model/job.js";
import { checkCondition } from "./expression.js";
import { withoutInputs } from "./inputs.js";
import { parseTime, sleepsPastDeadline } from "./sleep-deadline.js";
import { checkTemplate } from "./template.js";

/**
 * Limits of one flow submission. A flow holds up to 10,000 jobs (as Cloudflare Workflows allows
 * 10,000 steps): a transition costs the jobs it changes (job-table.ts), the scripts write long
 * lists in slices (Lua's `unpack` takes some 8,000 values), and a commit too big for one storage
 * call goes in several (shared/store/commit-calls.ts), so a 1 MiB flow file of 10,000 jobs all
 * ready at once is created and queued in calls each well under storage's limit (docs/limits.md).
 */
export const FLOW_LIMITS = {
  jobsPerFlow: 10_000,
  scriptBytes: 16 * 1024,
  dependenciesPerJob: 1000,
} as const;

/** A job's name inside its flow: how other jobs refer to it, and how its results are named. */
export const JobName = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_.-]{0,63}$/, "a name: letters, digits, _ . -, starting with a letter or _, at most 64");

/** A reference to another job of the same flow: its id, or its name. */
export const JobRef = z.union([Id, JobName]);
export type JobRef = z.infer<typeof JobRef>;

/** A script's text: at most FLOW_LIMITS.scriptBytes of UTF-8. */
const ScriptText = z.string().refine((s) => new TextEncoder().encode(s).length <= FLOW_LIMITS.scriptBytes, {
  message: `a script is at most ${FLOW_LIMITS.scriptBytes} bytes`,
});

/**
 * What undoes a job once it finished, should its flow fail (or be cancelled with `compensate`):
 * a script with a job's script fields and their limits. It runs as a job of its own, the job's
 * compensation, named `<job>.compensate` (docs/flows.md, "Compensation").
 */
export const CompensateInput = z
  .object({
    script: ScriptText,
    script_type: ScriptType,
    timeout: Seconds.default(JOB_DEFAULTS.timeout),
    retries: z.int().min(0).max(255).default(JOB_DEFAULTS.retries),
    env_vars: EnvVarsInput.default({}),
    runner_id: Id.optional(),
  })
  .strict()
  .describe(
    "A script that undoes this job once it finished, run if the flow fails or is cancelled with compensate (docs/flows.md).",
  );
export type CompensateInput = z.output<typeof CompensateInput>;

/** What a job does instead of a script, each field one kind of job. */
const WORK = ["script", "wait", "sleep", "sleep_until", "flow"] as const;

/**
 * One job of a flow submission. `id` is optional (allocated when absent); `name` lets other jobs
 * depend on it without knowing its id. `depends` lists ids or names; `dependends`, the name the
 * herocoordinator model gives it, is accepted as an alias. A job runs a `script` (of a
 * `script_type`, on a runner), or takes no runner: it `wait`s for an event, sleeps (`sleep`
 * seconds, `sleep_until` a time), or runs a child `flow` from a template of the same context.
 * `when`, `needs` and `allow_failure` are its flow's rules; `compensate` what undoes it should the
 * flow fail.
 */
export const FlowJobInput = z
  .object({
    id: Id.optional(),
    name: JobName.optional(),
    script: ScriptText.optional(),
    script_type: ScriptType.optional(),
    map: MapSpec.optional().describe(
      'Run the script once per item of a dependency\'s result value holding a JSON list: `over: <dependency>.<key>` (docs/flows.md, "Map").',
    ),
    wait: WaitSpec.optional(),
    sleep: z.int().min(0).max(LONGEST_WAIT).optional().describe("Seconds to sleep, taking no runner."),
    sleep_until: z
      .string()
      .max(256)
      .optional()
      .describe("An RFC 3339 time to sleep until, or a text naming `${VARIABLE}`s that gives one when the job starts."),
    flow: ChildFlowSpec.optional().describe(
      "A child flow: a template of the same context (its version, else the latest when the job starts) and its inputs; the job ends as that flow ends (docs/flows.md).",
    ),
    when: z
      .string()
      .optional()
      .describe("A CEL expression over deps, status, env and inputs: false means the job is skipped (docs/flows.md)."),
    needs: Needs.default("all_finished"),
    allow_failure: z.boolean().default(false),
    timeout: Seconds.default(JOB_DEFAULTS.timeout),
    retries: z.int().min(0).max(255).default(JOB_DEFAULTS.retries),
    env_vars: EnvVarsInput.default({}),
    prerequisites: z.array(z.string().max(256)).max(256).default([]),
    depends: z.array(JobRef).max(FLOW_LIMITS.dependenciesPerJob).optional(),
    dependends: z.array(JobRef).max(FLOW_LIMITS.dependenciesPerJob).optional(),
    runner_id: Id.optional(),
    compensate: CompensateInput.optional(),
  })
  .strict()
  .superRefine((job, ctx) => {
    if (job.dependends !== undefined && job.depends !== undefined) {
      ctx.addIssue({ code: "custom", path: ["dependends"], message: "give depends or its alias dependends, not both" });
    }
    checkWork(job, (path, message) => ctx.addIssue({ code: "custom", path: [path], message }));
  })
  .transform(({ depends, dependends, ...job }) => ({ ...job, depends: depends ?? dependends ?? [] }));
export type FlowJobInput = z.output<typeof FlowJobInput>;

/** Message timeouts of a flow's jobs, in seconds (defaults in MESSAGE_TIMEOUTS). */
export const MessageTimeouts = z
  .object({
    /** Not delivered to a runner within this: the delivery failed. */
    timeout: Seconds.min(1).optional(),
    /** Delivered but not acknowledged within this. */
    timeout_ack: Seconds.min(1).optional(),
    /**
     * Acknowledged, the runner must report (result, heartbeat, logs) within this of its last
     * report: a lease each report renews, up to the job's own timeout (default: the job's timeout
     * plus a minute, so no heartbeats are needed).
     */
    timeout_result: Seconds.min(1).optional(),
    /** Retry backoff: base and cap of the exponential, in milliseconds (full jitter). */
    retry_base_ms: z.int().min(0).max(3_600_000).optional(),
    retry_cap_ms: z.int().min(0).max(86_400_000).optional(),
    /** The whole flow must end within this of its start, or it ends in error (default: no limit). */
    flow: z.int().min(1).max(LONGEST_WAIT).optional(),
  })
  .strict();

export const MESSAGE_TIMEOUTS = { timeout: 300, timeout_ack: 60, resultGrace: 60 } as const;

/**
 * The fields of a flow submission, without the checks across them (FlowSubmission adds those):
 * what a schedule's template takes part of.
 */
export const FlowSubmissionFields = z
  .object({
    id: Id.optional(),
    env_vars: EnvVarsInput.default({}),
    jobs: z
      .array(FlowJobInput)
      .min(1, "a flow has at least one job")
      .max(FLOW_LIMITS.jobsPerFlow, `a flow has at most ${FLOW_LIMITS.jobsPerFlow} jobs`),
    start: z.boolean().default(false),
    timeouts: MessageTimeouts.default({}),
    priority: FlowPriority.default(0),
    max_parallel: MaxParallel.optional(),
    name: FlowName.optional(),
    labels: FlowLabels.optional(),
  })
  .strict();

/**
 * Refuses a sleep that cannot end before the flow's deadline, alone or after the sleeps it waits
 * for (`sleepsPastDeadline`), naming the job's field.
 */
export function withDeadlineChecks<
  T extends z.ZodType<{ timeouts: { flow?: number | undefined }; jobs: FlowJobInput[] }>,
>(schema: T) {
  return schema.superRefine((flow, ctx) => {
    const limit = flow.timeouts.flow;
    if (limit === undefined) return;
    for (const { index, field, message } of sleepsPastDeadline(flow.jobs, limit, Date.now()))
      ctx.addIssue({ code: "custom", path: ["jobs", index, field], message });
  });
}

/** `POST /v1/contexts/{id}/flows`: a DAG of jobs, stored all or nothing. */
export const FlowSubmission = withoutInputs(withDeadlineChecks(FlowSubmissionFields)).meta({ id: "FlowSubmission" });
export type FlowSubmission = z.output<typeof FlowSubmission>;
export type FlowSubmissionInput = z.input<typeof FlowSubmission>;

/** Checks that a job says what it does (one kind of work) and only what that kind takes. */
function checkWork(
  job: { [K in (typeof WORK)[number] | "script_type" | "runner_id" | "retries" | "when" | "map"]?: unknown },
  issue: (field: string, message: string) => void,
): void {
  const given = WORK.filter((field) => job[field] !== undefined);
  if (given.length !== 1) {
    issue(
      given[1] ?? "script",
      given.length === 0
        ? "a job runs a script, waits for an event (wait), sleeps (sleep, sleep_until) or runs a child flow (flow): give one"
        : `a job does one thing: it gives ${given.join(" and ")}`,
    );
    return;
  }
  if (given[0] === "script") {
    if (job.script_type === undefined) issue("script_type", "required with script: the language it is in");
  } else {
    if (job.map !== undefined) issue("map", `a map runs its script once per item: it cannot give ${given[0]}`);
    for (const field of ["script_type", "runner_id"] as const)
      if (job[field] !== undefined) issue(field, `a job that gives ${given[0]} runs no script: ${field} has no use`);
    if (typeof job.retries === "number" && job.retries > 0)
      issue("retries", `a job that gives ${given[0]} runs no script: it is never retried`);
  }
  const key = (job.wait as { key?: string } | undefined)?.key;
  const bad = key !== undefined ? checkTemplate(key) : undefined;
  if (bad) issue("wait", `key: ${bad}`);
  if (typeof job.sleep_until === "string") {
    const until = checkTemplate(job.sleep_until) ?? checkTime(job.sleep_until);
    if (until) issue("sleep_until", until);
  }
  if (typeof job.when === "string") {
    const wrong = checkCondition(job.when);
    if (wrong) issue("when", wrong);
  }
}

/** Why a time given as a literal is not one (undefined when it is, or when it names variables). */
function checkTime(text: string): string | undefined {
  if (text.includes("${")) return undefined;
  return Number.isNaN(parseTime(text)) ? `not an RFC 3339 time: ${JSON.stringify(text)}` : undefined;
}

/**
 * The fields of a re-run (`POST …/flows/{f}/rerun`, `flow.rerun`), every one optional: none, and
 * a failed flow runs again from its failed jobs. `from` re-runs a flow that ended from that job
 * and everything downstream of it, and needs `run` (`runWithFrom`).
 */
export const RerunFields = z
  .object({
    from: JobRef.optional().describe(
      "The job to re-run from, by id or name: it and everything downstream of it run again, what is upstream keeps its result. The flow must have ended (finished or error).",
    ),
    env_vars: EnvVarsInput.optional().describe(
      "Variables set over the flow's env_vars from this run on (a template's inputs are its INPUT_<NAME> variables: this changes them). The flow's env with them over it is held to the same 64 KiB.",
    ),
    run: z
      .int()
      .min(1)
      .max(1_000_000)
      .optional()
      .describe(
        "The run this re-run replaces, as the flow's view gives it (`run`): another run is refused 409, so a repeated request never runs the flow twice. Required with `from`.",
      ),
  })
  .strict();

/**
 * `run` is required with `from`: a re-run of a flow that ended could otherwise be applied twice
 * by a repeated request (each would find the flow ended, and run it again).
 */
export function runWithFrom(body: { from?: unknown; run?: number | undefined }, ctx: z.RefinementCtx): void {
  if (body.from !== undefined && body.run === undefined)
    ctx.addIssue({
      code: "custom",
      path: ["run"],
      message: "required with from: the run being replaced, as the flow's view gives it (run)",
    });
}

/** The body of a re-run, as the route takes it. */
export const RerunRequest = RerunFields.superRefine(runWithFrom).meta({ id: "RerunRequest" });
export type RerunRequest = z.infer<typeof RerunRequest>;
