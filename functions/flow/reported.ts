import type { FlowEvent } from "../../shared/flow/index.js";
import type { EventAnswer, EventExtras, ReportedEvent } from "../core/contracts.js";
import { toProblem } from "../core/errors.js";
import { problemData, type RpcResult } from "../core/problem.js";
import type { GroupCommit } from "./group-commit.js";
import type { NonceLedger } from "./nonces.js";

/**
 * A runner's event, once its flow is known to exist: a replayed nonce is refused before anything
 * else, then the transition is applied and answered when durable, with the job's status and the
 * origin the flow's runners call back.
 */
export async function applyReported(
  nonces: NonceLedger,
  commits: Pick<GroupCommit, "enqueue">,
  origin: string,
  event: FlowEvent,
  extras: EventExtras,
): Promise<EventAnswer> {
  if (extras.nonce && !(await nonces.use(extras.nonce.keyid, extras.nonce.value, extras.nonce.ttlMs))) {
    return { outcome: "replayed", reason: "this nonce was already used: sign every request with a new nonce" };
  }
  const logs = extras.logs && "job" in event ? { job: event.job, lines: extras.logs } : undefined;
  // The jitter of a retry's backoff is chosen here, so the machine stays pure.
  const t = await commits.enqueue(event.type === "failed" ? { ...event, random: Math.random() } : event, logs);
  const job = "job" in event ? t.state.jobs.get(event.job) : undefined;
  return {
    outcome: t.outcome,
    ...(t.reason ? { reason: t.reason } : {}),
    ...(job ? { status: job.status } : {}),
    origin,
  };
}

/**
 * Applies a batch of runner events with `apply`, answering each in order: one job's events one
 * after another (a nonce check may await, and an ack must not be overtaken by its result),
 * different jobs' at once, so that what arrives together meets in one group commit. One event's
 * failure is its own answer.
 */
export function inJobOrder(
  events: ReportedEvent[],
  apply: (event: FlowEvent, extras: EventExtras) => Promise<EventAnswer>,
): Promise<RpcResult<EventAnswer>[]> {
  const lanes = new Map<number, Promise<unknown>>();
  return Promise.all(
    events.map(({ event, extras }) => {
      const job = "job" in event ? event.job : -1;
      const answer = (lanes.get(job) ?? Promise.resolve())
        .then(() => apply(event, extras ?? {}))
        .then(
          (ok): RpcResult<EventAnswer> => ({ ok }),
          (error: unknown): RpcResult<EventAnswer> => ({ problem: problemData(toProblem(error)) }),
        );
      lanes.set(job, answer);
      return answer;
    }),
  );
}
