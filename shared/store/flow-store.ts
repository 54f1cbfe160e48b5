import { attemptBlock, type FlowState } from "../flow/index.js";
import type { Keys } from "../keys.js";
import type { Flow, Message, RunnerJob } from "../model/index.js";
import { decodeRecord, encodePairs } from "./codec.js";
import { ConflictError } from "./errors.js";
import { parsePushRunners, type PushRunnerName } from "./push-runners.js";
import { flowRecord, jobRecord } from "./flow-records.js";
import { listFlows, type FlowListQuery } from "./flow-list.js";
import type { CommitPlan } from "./flow-plan.js";
import { codecs, layouts } from "./layouts.js";
import { readHash, readHashes, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import { relayClaim, relaySettle, reserveFlow } from "./scripts/flow.js";
import type { CommitOutcome } from "./commit-claims.js";
import { runPlan, type ClaimsOfCommit, type Creation, type RunnablePlan } from "./flow-calls.js";

export type { ClaimsOfCommit, Creation } from "./flow-calls.js";

/** Ids reserved for one submission. */
export interface ReservedIds {
  flowId: number;
  firstJobId: number;
  firstMessageId: number;
}

/** Ids reserved now, and the push runners the context's dispatcher named (when asked). */
export interface FreshReservation extends ReservedIds {
  pushRunners: PushRunnerName[];
}

/**
 * Ids reserved now, or (`existing`) by an earlier submission with the same Idempotency-Key: its
 * ids and its request's digest.
 */
export type Reservation = FreshReservation | { existing: ReservedIds & { digest: string } } | { replayed: true };

export interface ReserveRequest {
  contextId: number;
  callerId: number;
  flowId?: number;
  /** Jobs without a caller-chosen id. */
  jobsToAllocate: number;
  /** The highest job id the caller chose (allocation starts above it), 0 if none. */
  highestChosenJobId: number;
  messages: number;
  idempotencyKey?: string;
  /** The request's digest, kept with the Idempotency-Key (a reuse with another request is refused). */
  digest?: string;
  /** The signature's nonce, spent by the reservation (`replayed` when it was used before). */
  nonce?: { keyid: string; value: string; ttlMs: number };
  /** Read the push runners the context's dispatcher named (a submission that starts its flow). */
  pushRunners?: boolean;
}

/** A flow as stored: its record, its jobs, and every message of its jobs' attempts. */
export interface StoredFlow {
  flow: Flow | null;
  jobs: RunnerJob[];
  /** Messages by job id, in attempt order. */
  messages: Map<number, Message[]>;
  /**
   * The incarnation token of the record read (the flow's, or a job's read alone: its `_op`, the
   * token of the call that created it); undefined for a hash this coordinator did not create whole.
   */
  incarnation?: string;
}

/**
 * What a record's creation left of it: null when there is no record; else its incarnation token
 * (`_op`), undefined for a hash this coordinator did not create whole (a late write after a wipe).
 */
export type RecordToken = null | { token: string | undefined };

/** The hash field in which a flow or a job run outside any flow keeps its incarnation token. */
export const INCARNATION_FIELD = "_op";

/** Where the relay of msg_out sends messages it took: delivered, or back to msg_out. */
export interface Settlement {
  delivered: string[];
  back: string[];
}

const IDEMPOTENCY_TTL_SECONDS = 24 * 3600;

/** Storage of flows: the scripts of their lifecycle and the reads that rebuild them. */
export class FlowStore {
  private readonly jobs: ReturnType<typeof layouts>["job"];

  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {
    this.jobs = layouts(keys).job;
  }

  /** Whether an Idempotency-Key has a reservation (a retry of a submission that got that far). */
  async reserved(contextId: number, callerId: number, idempotencyKey: string): Promise<boolean> {
    const key = this.keys.idempotency(contextId, callerId, idempotencyKey);
    return Number(await callRedis(() => this.redis.exec<number>(["EXISTS", key]))) === 1;
  }

  /**
   * The flow an Idempotency-Key reserved, if it reserved one (its value is
   * `<flow>:<job>:<message>:<digest>`, see reserveFlow): how a child flow whose start may have
   * got that far is found without starting it.
   */
  async reservedFlow(contextId: number, callerId: number, idempotencyKey: string): Promise<number | undefined> {
    return (await this.reservedFlows(contextId, callerId, [idempotencyKey]))[0];
  }

  /**
   * The flows several Idempotency-Keys reserved, in order (undefined for a key that reserved
   * none): one MGET (the keys are all in the context's slot), so a parent with many child-flow
   * jobs finds their children in one storage call, not one each.
   */
  async reservedFlows(contextId: number, callerId: number, idempotencyKeys: string[]): Promise<(number | undefined)[]> {
    if (idempotencyKeys.length === 0) return [];
    const keys = idempotencyKeys.map((k) => this.keys.idempotency(contextId, callerId, k));
    const values = await callRedis(() => this.redis.exec<(string | null)[]>(["MGET", ...keys]));
    return values.map((value) => {
      const flowId = Number(String(value ?? "").split(":")[0]);
      return Number.isInteger(flowId) && flowId > 0 ? flowId : undefined;
    });
  }

  /** Allocates a submission's ids, or finds the flow its Idempotency-Key already created. */
  async reserve(r: ReserveRequest): Promise<Reservation> {
    const keys = [this.keys.ids(r.contextId)];
    const idempotent = r.idempotencyKey !== undefined && r.digest !== undefined;
    if (idempotent) keys.push(this.keys.idempotency(r.contextId, r.callerId, r.idempotencyKey as string));
    if (r.pushRunners) keys.push(this.keys.context(r.contextId));
    if (r.nonce) keys.push(this.keys.nonce(r.nonce.keyid, r.nonce.value, r.contextId));
    const reply = (await reserveFlow.run(this.redis, keys, [
      r.flowId ?? "",
      this.keys.jobCounter(r.callerId),
      r.jobsToAllocate,
      r.highestChosenJobId,
      r.messages,
      IDEMPOTENCY_TTL_SECONDS,
      idempotent ? (r.digest as string) : "",
      this.keys.messageCounter(r.callerId),
      r.nonce ? crypto.randomUUID() : "",
      r.nonce ? Math.ceil(r.nonce.ttlMs / 1000) : 0,
      r.pushRunners ? "1" : "",
    ])) as (number | string)[];
    if (Number(reply[0]) === 2) return { replayed: true };
    if (Number(reply[0]) === 1) {
      const [flowId, firstJobId, firstMessageId, digest] = String(reply[1]).split(":");
      const existing = {
        flowId: Number(flowId),
        firstJobId: Number(firstJobId),
        firstMessageId: Number(firstMessageId),
      };
      return { existing: { ...existing, digest: digest ?? "" } };
    }
    return {
      flowId: Number(reply[1]),
      firstJobId: Number(reply[2]),
      firstMessageId: Number(reply[3]),
      pushRunners: parsePushRunners(reply[4]),
    };
  }

  /**
   * Stores a new flow and its jobs all or nothing. `chosen` are the positions (in `order`) of
   * jobs whose ids the caller chose: only those can collide. Returns false if the flow exists.
   * `token` is the flow's incarnation token (see `creation`).
   */
  async create(state: FlowState, chosen: number[], now: number, token?: string): Promise<boolean> {
    try {
      await this.commit(this.creation(state, chosen, now, undefined, token));
      return true;
    } catch (error) {
      if (error instanceof ConflictError && error.kind === "flow") return false;
      throw error;
    }
  }

  /**
   * The script call that stores a new flow and its jobs and, with `first`, runs that commit's
   * sections in the same step (a flow submitted with `start`). Run it with `commit`. With a
   * commit it is idempotent like one, so it can be left pending and run again: the flow keeps
   * the creation's own token, which tells a re-run of this very call from another flow that
   * holds the id (a trace id would not: a client's retry resends its `traceparent`).
   *
   * That token (`_op` in the flow's hash) is also the flow's incarnation: its FlowCoordinator
   * keeps it with its own storage and wipes that storage when the record it reads holds
   * another (docs/architecture.md, "A flow's Durable Object"). `token` is the coordinator's.
   */
  creation(
    state: FlowState,
    chosen: number[],
    now: number,
    first?: Pick<CommitPlan, "keys" | "args">,
    token: string = crypto.randomUUID(),
  ): Creation {
    const ctx = state.contextId;
    const flowFields = encodePairs(codecs.flow, flowRecord(state, now));
    const keys = [
      this.keys.flow(ctx, state.id),
      this.keys.index(ctx, "flow"),
      this.keys.flowsByStatus(ctx, state.status),
      this.keys.index(ctx, "job"),
    ];
    const args: string[] = [
      String(state.id),
      String(state.order.length),
      chosen.map((p) => p + 1).join(","),
      token,
      String(flowFields.length / 2),
      ...flowFields.map(String),
    ];
    for (const id of state.order) {
      const job = state.jobs.job(id);
      const fields = encodePairs(codecs.job, jobRecord(state, job, now));
      const ref = { context_id: ctx, caller_id: state.callerId, id };
      keys.push(this.jobs.key(ref));
      args.push(this.jobs.indexMember(ref), String(fields.length / 2), ...fields.map(String));
    }
    const alone = { keys, args, creates: state.order, caller: state.callerId };
    return first ? this.withCommit(alone, first) : alone;
  }

  /**
   * A creation made alone, with the first call of its commit after it (the same call): plan the
   * commit with the room the creation leaves (`planCommit`'s `firstRoom`), then join them.
   */
  withCommit(creation: Creation, first: Pick<CommitPlan, "keys" | "args">): Creation {
    return { ...creation, keys: [...creation.keys, ...first.keys], args: [...creation.args, ...first.args] };
  }

  /**
   * Runs a commit plan's script, or a creation's (see `creation`), with `claims` appended to it:
   * see `runPlan` (flow-calls.ts), which says what it returns and throws.
   */
  commit(plan: RunnablePlan, claims?: ClaimsOfCommit, record?: { key: string; token: string }): Promise<CommitOutcome> {
    return runPlan(this.redis, this.keys, plan, claims, record);
  }

  /** Reads a flow with all its jobs and their messages (two round trips), or null. */
  async load(contextId: number, flowId: number): Promise<StoredFlow | null> {
    const key = this.keys.flow(contextId, flowId);
    const hash = await readHash(this.redis, key);
    if (!hash) return null;
    const flow = decodeRecord(codecs.flow, key, hash);
    const token = hash[INCARNATION_FIELD];
    return {
      flow,
      ...(await this.loadJobs(contextId, flow.caller_id, flow.jobs)),
      ...(token !== undefined ? { incarnation: token } : {}),
    };
  }

  /** Reads a job run outside any flow with its attempts' messages (two round trips), or null. */
  async loadJob(contextId: number, callerId: number, jobId: number): Promise<StoredFlow | null> {
    const { jobs, messages, hashes } = await this.readJobs(contextId, callerId, [jobId]);
    const token = hashes[0]?.[INCARNATION_FIELD];
    if (jobs.length === 0) return null;
    return { flow: null, jobs, messages, ...(token !== undefined ? { incarnation: token } : {}) };
  }

  /**
   * The incarnation token of the flow or job hash at `key` (one command), to tell whether the
   * record a Durable Object holds in memory is still the one in Redis.
   */
  async recordToken(key: string): Promise<RecordToken> {
    const [token, id] = await callRedis(() =>
      this.redis.exec<(string | null)[]>(["HMGET", key, INCARNATION_FIELD, "id"]),
    );
    if (id === null || id === undefined) return null;
    return { token: token === null || token === undefined ? undefined : String(token) };
  }

  /** Reads jobs and the messages of every attempt they may have had. */
  async loadJobs(contextId: number, callerId: number, jobIds: number[]): Promise<Omit<StoredFlow, "flow">> {
    const { jobs, messages } = await this.readJobs(contextId, callerId, jobIds);
    return { jobs, messages };
  }

  private async readJobs(
    contextId: number,
    callerId: number,
    jobIds: number[],
  ): Promise<Omit<StoredFlow, "flow"> & { hashes: (Record<string, string> | null)[] }> {
    const jobKeys = jobIds.map((id) => this.keys.job(contextId, callerId, id));
    const jobHashes = await readHashes(this.redis, jobKeys);
    const jobs = jobHashes.flatMap((h, i) => (h ? [decodeRecord(codecs.job, jobKeys[i] as string, h)] : []));
    const wanted = jobs.flatMap((job) =>
      // The current run's attempts: after a re-run they start past attempt_floor.
      job.message_base === undefined
        ? []
        : Array.from({ length: attemptBlock(job) }, (_, a) => ({
            job: job.id,
            id: (job.message_base as number) + (job.attempt_floor ?? 0) + a,
          })),
    );
    const messageKeys = wanted.map((w) => this.keys.message(contextId, callerId, w.id));
    const messageHashes = await readHashes(this.redis, messageKeys);
    const messages = new Map<number, Message[]>();
    messageHashes.forEach((h, i) => {
      if (!h) return;
      const message = decodeRecord(codecs.message, messageKeys[i] as string, h);
      const list = messages.get((wanted[i] as { job: number }).job) ?? [];
      list.push(message);
      messages.set((wanted[i] as { job: number }).job, list);
    });
    return { jobs, messages, hashes: jobHashes };
  }

  /** Loads messages by key (for the relay's messages of other flows). */
  async loadMessages(keys: string[]): Promise<(Message | null)[]> {
    const hashes = await readHashes(this.redis, keys);
    return hashes.map((h, i) => (h ? decodeRecord(codecs.message, keys[i] as string, h) : null));
  }

  /** Takes up to `max` messages from msg_out into the in-flight set (none while paused). */
  async claim(contextId: number, max: number, settleBy: number): Promise<string[]> {
    const taken = await relayClaim.run(
      this.redis,
      [this.keys.msgOut(contextId), this.keys.inflight(contextId), this.keys.context(contextId)],
      [max, settleBy, Date.now()],
    );
    return Array.isArray(taken) ? taken.map(String) : [];
  }

  /** When the oldest message the relay of msg_out holds must be settled (epoch ms); undefined when it holds none. */
  async firstInFlight(contextId: number): Promise<number | undefined> {
    const first = await callRedis(() => this.redis.zrange(this.keys.inflight(contextId), 0, 0, { withScores: true }));
    return first.length >= 2 ? Number(first[1]) : undefined;
  }

  /** Settles what the relay of msg_out took (with the claim's score): delivered, or back to msg_out. */
  async settle(contextId: number, s: Settlement, claimScore: number): Promise<void> {
    const keys = [this.keys.inflight(contextId), this.keys.msgOut(contextId)];
    const args: string[] = [String(claimScore)];
    if (s.delivered.length > 0) args.push("D", String(s.delivered.length), ...s.delivered);
    if (s.back.length > 0) args.push("B", String(s.back.length), ...s.back);
    if (args.length === 1) return;
    // Delivered-only is the common case: one ZREM, no script.
    if (s.back.length === 0) {
      await callRedis(() => this.redis.exec(["ZREM", keys[0] as string, ...s.delivered]));
      return;
    }
    await relaySettle.run(this.redis, keys, args);
  }

  /** Lists flows by id, all or those of one status, optionally by name and labels (flow-list.ts). */
  async list(contextId: number, query: FlowListQuery): Promise<Page<Flow>> {
    return listFlows(this.redis, this.keys, contextId, query);
  }
}
