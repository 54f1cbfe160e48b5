/**
 * What goes inside the keys Keys builds (keys.ts): the members of sorted sets and lists (a
 * deadline's owner, a wait, a work item, an inbox entry, a dead letter's ids) and how to read
 * them back. Built and parsed here only, so a member has one text everywhere.
 */

/** What a member of a context's deadline set names: a flow, or a job outside any flow. */
export type DeadlineOwner = { flowId: number } | { callerId: number; jobId: number };

/** A member of a context's deadline set (`Keys.deadlines`): `flow:<id>`, or `job:<caller>:<id>`. */
export function deadlineMember(owner: DeadlineOwner): string {
  return "flowId" in owner ? `flow:${owner.flowId}` : `job:${owner.callerId}:${owner.jobId}`;
}

/** A member of a wait index (`Keys.waits`): `<flow>:<job>`. */
export function waitMember(flowId: number, jobId: number): string {
  return `${flowId}:${jobId}`;
}

/** Reads a wait-index member back; null for anything else. */
export function parseWaitMember(member: string): { flowId: number; jobId: number } | null {
  const m = /^(\d+):(\d+)$/.exec(member);
  return m ? { flowId: Number(m[1]), jobId: Number(m[2]) } : null;
}

/** Reads a deadline-set member back; null for anything else. */
export function parseDeadlineMember(member: string): DeadlineOwner | null {
  const flow = /^flow:(\d+)$/.exec(member);
  if (flow) return { flowId: Number(flow[1]) };
  const job = /^job:(\d+):(\d+)$/.exec(member);
  return job ? { callerId: Number(job[1]), jobId: Number(job[2]) } : null;
}

/**
 * Ids of dead letters, fields of the context's dead-letter hash (`Keys.deadLetters`): one per
 * job that ran out of retries (`<flow>:<job>:<attempt>`), per message that could not reach its
 * actor, and per runner report that could not be read.
 */
export const deadLetterIds = {
  job: (flowId: number, jobId: number, attempt: number): string => `${flowId}:${jobId}:${attempt}`,
  message: (callerId: number, messageId: number): string => `message:${callerId}:${messageId}`,
  payload: (flowId: number, jobId: number, runnerId: number, at: number): string =>
    `payload:${flowId}:${jobId}:${runnerId}:${at}`,
};

/** The kinds of context objects that have an index for listing. */
export type IndexedKind = "flow" | "job" | "message" | "runner";

/**
 * One attempt of a job waiting to run or held by a runner: its message's key and what routes it
 * to the Durable Object that owns the attempt (flow, job, attempt; flow 0 is a job outside any
 * flow, whose caller is in the message key).
 */
export interface WorkItem {
  messageKey: string;
  flowId: number;
  jobId: number;
  attempt: number;
}

/**
 * A work item as stored in queues and slot sets: `<message key>|<flow>|<job>|<attempt>`. In a
 * queue it may end in `|a<runner>`: a retry that would rather not go back to that runner (the
 * claim script strips it before the item takes a slot).
 */
export function workItem(item: WorkItem, avoidRunner?: number): string {
  const member = `${item.messageKey}|${item.flowId}|${item.jobId}|${item.attempt}`;
  return avoidRunner === undefined ? member : `${member}|a${avoidRunner}`;
}

/** Reads a work item back (ignoring an avoid suffix); null for anything else. */
export function parseWorkItem(member: string): WorkItem | null {
  const m = /^([^|]+)\|(\d+)\|(\d+)\|(\d+)(?:\|a\d+)?$/.exec(member);
  if (!m) return null;
  return { messageKey: m[1] as string, flowId: Number(m[2]), jobId: Number(m[3]), attempt: Number(m[4]) };
}

/** The caller and id a message key names (`…message:<caller>:<id>`); null for another key. */
export function parseMessageKey(key: string): { callerId: number; id: number } | null {
  const m = /:message:(\d+):(\d+)$/.exec(key);
  return m ? { callerId: Number(m[1]), id: Number(m[2]) } : null;
}

/** A member of `inboxDue`: `<recipient>|<message key>` (the recipient names the inbox). */
export function inboxEntry(actorId: number, messageKey: string): string {
  return `${actorId}|${messageKey}`;
}

/** The recipient and message key an `inboxDue` member names; null for anything else. */
export function parseInboxEntry(entry: string): { actorId: number; messageKey: string } | null {
  const m = /^(\d+)\|(.+)$/.exec(entry);
  return m ? { actorId: Number(m[1]), messageKey: m[2] as string } : null;
}
