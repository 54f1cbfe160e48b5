import type { Keys } from "../keys.js";
import { Actor, Context, Flow, Message, Runner, RunnerJob, defaultRunnerTopic } from "../model/index.js";
import type { RecordCodec } from "./codec.js";
import type { RecordLayout, RecordRef } from "./repository.js";

/** Storage kinds of every model's fields (docs/architecture.md: scalars as text, the rest as JSON). */
export const codecs = {
  actor: {
    name: "actor",
    schema: Actor,
    fields: { id: "int", pubkey: "str", address: "json", created_at: "int", updated_at: "int" },
  },
  context: {
    name: "context",
    schema: Context,
    fields: {
      id: "int",
      admins: "json",
      readers: "json",
      executors: "json",
      paused: "bool",
      max_inflight: "int",
      flow_starts_per_minute: "int",
      event_lookback: "int",
      retention: "json",
      deleting_since: "int",
      created_at: "int",
      updated_at: "int",
    },
  },
  flow: {
    name: "flow",
    schema: Flow,
    fields: {
      id: "int",
      caller_id: "int",
      context_id: "int",
      jobs: "json",
      env_vars: "json",
      result: "json",
      created_at: "int",
      updated_at: "int",
      status: "str",
      error: "json",
      timeouts: "json",
      trace_id: "str",
      priority: "int",
      max_parallel: "int",
      started_at: "int",
      compensating_at: "int",
      ended_at: "int",
      run: "int",
      run_started_at: "int",
      template: "json",
      parent: "json",
      name: "str",
      labels: "json",
      schedule_id: "int",
      progress: "json",
    },
  },
  job: {
    name: "job",
    schema: RunnerJob,
    fields: {
      id: "int",
      caller_id: "int",
      context_id: "int",
      flow_id: "int",
      script: "str",
      script_type: "str",
      timeout: "int",
      retries: "int",
      env_vars: "json",
      result: "json",
      prerequisites: "json",
      depends: "json",
      runner_id: "int",
      name: "str",
      wait: "json",
      map: "json",
      map_of: "int",
      item_index: "int",
      added_by: "int",
      sleep: "int",
      sleep_until: "str",
      flow: "json",
      child_flow_id: "int",
      when: "str",
      needs: "str",
      allow_failure: "bool",
      skip_reason: "str",
      compensates: "int",
      message_base: "int",
      attempt: "int",
      attempt_floor: "int",
      past_messages: "json",
      past_children: "json",
      error: "str",
      timeouts: "json",
      latency_ms: "int",
      duration_ms: "int",
      ended_at: "int",
      last_runner_id: "int",
      created_at: "int",
      updated_at: "int",
      status: "str",
    },
  },
  message: {
    name: "message",
    schema: Message,
    fields: {
      id: "int",
      caller_id: "int",
      context_id: "int",
      message: "str",
      message_type: "str",
      message_format_type: "str",
      timeout: "int",
      timeout_ack: "int",
      timeout_result: "int",
      job: "json",
      logs: "json",
      created_at: "int",
      updated_at: "int",
      status: "str",
      attempt: "int",
      runner_id: "int",
      avoid_runner_id: "int",
      trace_id: "str",
      ended_at: "int",
      to: "int",
      subject: "str",
      flow_result: "json",
    },
  },
  runner: {
    name: "runner",
    schema: Runner,
    fields: {
      id: "int",
      context_id: "int",
      pubkey: "str",
      address: "str",
      topic: "str",
      local: "bool",
      runner_type: "str",
      script_types: "json",
      concurrency: "int",
      deliveries_per_post: "int",
      created_at: "int",
      updated_at: "int",
    },
  },
} as const satisfies {
  actor: RecordCodec<Actor>;
  context: RecordCodec<Context>;
  flow: RecordCodec<Flow>;
  job: RecordCodec<RunnerJob>;
  message: RecordCodec<Message>;
  runner: RecordCodec<Runner>;
};

function ctx(ref: Omit<RecordRef, "id">): number {
  if (ref.context_id === undefined) throw new Error("a context-scoped record needs context_id");
  return ref.context_id;
}

function caller(ref: Omit<RecordRef, "id">): number {
  if (ref.caller_id === undefined) throw new Error("a caller-scoped record needs caller_id");
  return ref.caller_id;
}

/** Where each model lives: the model's canonical keys inside the context namespace. */
export function layouts(keys: Keys) {
  const actor: RecordLayout<Actor> = {
    codec: codecs.actor,
    key: (r) => keys.actor(r.id),
    counter: () => ({ key: keys.globalIds(), field: "actor" }),
    indexKey: () => keys.actorIndex(),
    indexMember: (r) => String(r.id),
    indexInSlot: false,
  };
  const context: RecordLayout<Context> = {
    codec: codecs.context,
    key: (r) => keys.context(r.id),
    counter: () => ({ key: keys.globalIds(), field: "context" }),
    indexKey: () => keys.contextIndex(),
    indexMember: (r) => String(r.id),
    indexInSlot: false,
  };
  const flow: RecordLayout<Flow> = {
    codec: codecs.flow,
    key: (r) => keys.flow(ctx(r), r.id),
    counter: (r) => ({ key: keys.ids(ctx(r)), field: "flow" }),
    indexKey: (r) => keys.index(ctx(r), "flow"),
    indexMember: (r) => String(r.id),
    indexInSlot: true,
  };
  const job: RecordLayout<RunnerJob> = {
    codec: codecs.job,
    key: (r) => keys.job(ctx(r), caller(r), r.id),
    counter: (r) => ({ key: keys.ids(ctx(r)), field: keys.jobCounter(caller(r)) }),
    indexKey: (r) => keys.index(ctx(r), "job"),
    indexMember: (r) => `${caller(r)}:${r.id}`,
    indexInSlot: true,
  };
  const message: RecordLayout<Message> = {
    codec: codecs.message,
    key: (r) => keys.message(ctx(r), caller(r), r.id),
    counter: (r) => ({ key: keys.ids(ctx(r)), field: keys.messageCounter(caller(r)) }),
    indexKey: (r) => keys.index(ctx(r), "message"),
    indexMember: (r) => `${caller(r)}:${r.id}`,
    indexInSlot: true,
  };
  const runner: RecordLayout<Runner> = {
    codec: codecs.runner,
    key: (r) => keys.runner(ctx(r), r.id),
    counter: (r) => ({ key: keys.ids(ctx(r)), field: "runner" }),
    indexKey: (r) => keys.index(ctx(r), "runner"),
    indexMember: (r) => String(r.id),
    indexInSlot: true,
    withId: (input, id) => ({ ...input, topic: input.topic || defaultRunnerTopic(id) }),
  };
  return { actor, context, flow, job, message, runner };
}
