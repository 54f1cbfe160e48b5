import type { Keys } from "../keys.js";
import { ResultMap, type Message } from "../model/index.js";
import { CorruptRecordError } from "./errors.js";
import { callRedis, type Redis } from "./redis.js";

/** A flow (or a job outside any flow) whose results a result mail tells. */
interface ResultOwner {
  contextId: number;
  callerId: number;
  flowId: number;
  /** For a job outside any flow: its id. */
  jobId?: number;
  /** When the mail was written (epoch seconds): jobs that ended later (a re-run's) are not its. */
  writtenAt: number;
}

/**
 * A flow's results, read from where they are kept: once, in each finished job's record (the
 * flow's record and its result mail hold none; docs/limits.md). A result mail is filled in when it
 * is read from an inbox or POSTed. Two round trips for any number of mails (the flows' job lists,
 * then every job's name, status and result), and one command per job.
 */
export class FlowResults {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /**
   * A flow's results as stored (every finished job's, by job key in the flow's order), or a lone
   * job's (`jobId`); undefined when the flow is gone.
   */
  async ofFlow(
    contextId: number,
    callerId: number,
    flowId: number,
    jobId?: number,
  ): Promise<Record<string, ResultMap> | undefined> {
    const owner = { contextId, callerId, flowId, ...(jobId !== undefined ? { jobId } : {}), writtenAt: Infinity };
    return (await this.read([owner]))[0];
  }

  /** The messages, each flow result mail among them with `flow_result.result` filled in. */
  async fill(messages: Message[]): Promise<Message[]> {
    const owners = messages.map(ownerOf);
    const wanted = owners.filter((o): o is ResultOwner => o !== undefined);
    if (wanted.length === 0) return messages;
    const results = await this.read(wanted);
    let next = 0;
    return messages.map((message, i) => {
      if (!owners[i] || !message.flow_result) return message;
      const result = results[next++];
      return result ? { ...message, flow_result: { ...message.flow_result, result } } : message;
    });
  }

  /**
   * Each owner's results, by job key in the flow's job order: the jobs that had finished when its
   * mail was written. Undefined for a flow that is gone (removed by retention, or deleted).
   */
  private async read(owners: ResultOwner[]): Promise<(Record<string, ResultMap> | undefined)[]> {
    const jobLists = await this.jobLists(owners);
    const jobKeys = owners.map((o, i) => (jobLists[i] ?? []).map((id) => this.keys.job(o.contextId, o.callerId, id)));
    const flat = jobKeys.flat();
    const replies =
      flat.length === 0
        ? []
        : await callRedis(async () => {
            const p = this.redis.pipeline();
            for (const key of flat) p.hmget(key, "name", "status", "result", "ended_at");
            return (await p.exec()) as unknown[];
          });
    let at = 0;
    return jobKeys.map((keys, i) => {
      let ids = jobLists[i];
      const out: Record<string, ResultMap> = {};
      keys.forEach((key, j) => {
        const [name, status, result, endedAt] = hmgetReply(replies[at++]);
        if (status === null || status === undefined) {
          if ((owners[i] as ResultOwner).jobId !== undefined) ids = undefined; // a lone job gone
          return;
        }
        // Finished jobs keep their results through a re-run; one that ended after the mail was
        // written finished in a later run, which has a mail of its own.
        if (status !== "finished" || Number(endedAt) > (owners[i] as ResultOwner).writtenAt) return;
        out[typeof name === "string" ? name : String(ids?.[j])] = parseResult(key, result);
      });
      return ids === undefined ? undefined : out;
    });
  }

  /** The job ids of each owner: a flow's from its record (undefined: it is gone), a lone job's its own. */
  private async jobLists(owners: ResultOwner[]): Promise<(number[] | undefined)[]> {
    const flows = owners.filter((o) => o.jobId === undefined);
    const lists =
      flows.length === 0
        ? []
        : await callRedis(async () => {
            const p = this.redis.pipeline();
            for (const o of flows) p.hget(this.keys.flow(o.contextId, o.flowId), "jobs");
            return (await p.exec()) as unknown[];
          });
    let next = 0;
    return owners.map((o) => (o.jobId !== undefined ? [o.jobId] : jobIds(lists[next++])));
  }
}

/** Who a result mail is about, if it is one whose results are not filled in yet. */
function ownerOf(message: Message): ResultOwner | undefined {
  const info = message.flow_result;
  if (!info || info.result !== undefined) return undefined;
  return {
    contextId: message.context_id,
    callerId: message.caller_id,
    flowId: info.flow_id,
    ...(info.job_id !== undefined ? { jobId: info.job_id } : {}),
    writtenAt: message.created_at,
  };
}

/**
 * An HMGET of name, status and result as the client hands it back: the values in order (raw, as
 * this project reads replies), or an object by field.
 */
function hmgetReply(reply: unknown): unknown[] {
  if (Array.isArray(reply)) return reply;
  if (reply && typeof reply === "object") {
    const fields = reply as Record<string, unknown>;
    return [fields.name, fields.status, fields.result];
  }
  return [];
}

/** A flow record's `jobs` field as read (JSON text, or parsed by the client); undefined when gone. */
function jobIds(field: unknown): number[] | undefined {
  if (field === null || field === undefined) return undefined;
  const value: unknown = typeof field === "string" ? JSON.parse(field) : field;
  return Array.isArray(value) ? value.filter((id): id is number => typeof id === "number") : undefined;
}

function parseResult(key: string, field: unknown): ResultMap {
  if (field === null || field === undefined) return {};
  try {
    return ResultMap.parse(typeof field === "string" ? JSON.parse(field) : field);
  } catch {
    throw new CorruptRecordError(key, [{ field: "result", message: "not a result map" }]);
  }
}
