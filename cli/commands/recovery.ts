import type { DeadLetter } from "../../shared/model/index.js";
import { pageOptions, pageQuery, parseId, type Command, type Invocation } from "../command.js";
import { fields, table, timestamp } from "../output.js";
import { actorSession, contextSession, objectSession } from "../session.js";

/** Cancel and re-run flows (and jobs outside flows), pause and resume dispatch, read the dead letters. */

const cancel: Command = {
  name: "flow cancel",
  summary: "cancel a flow: nothing more runs, runners of jobs in flight are told to stop (admins)",
  usage: "flow cancel <context> <flow> [--reason <text>]",
  args: ["context", "flow"],
  options: { reason: { type: "string", help: "why (kept on the flow and its jobs)" } },
  details: [
    "A flow that already ended is refused (409, naming its status) and nothing changes: a cancel",
    "repeated after it succeeded too. A failed flow whose other jobs still run is cancelled: they stop.",
  ].join("\n"),
  examples: ["flowc flow cancel 1 3", 'flowc flow cancel 1 3 --reason "wrong input"'],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow cancel");
    const reason = invocation.options.string("reason");
    const view = await session.client.cancelFlow(contextId, flowId, reason);
    invocation.out.result(view, [`flow ${flowId} ${view.status}: ${view.error?.reason ?? "cancelled"}`]);
  },
};

const rerun: Command = {
  name: "flow rerun",
  summary: "run a failed flow again from its failed jobs; finished jobs are not run again (admins)",
  usage: "flow rerun <context> <flow>",
  args: ["context", "flow"],
  examples: ["flowc flow rerun 1 3", "flowc flow rerun 1 3 && flowc flow watch 1 3"],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow rerun");
    const view = await session.client.rerunFlow(contextId, flowId);
    const again = view.jobs.filter((j) => j.status !== "finished").map((j) => j.key);
    invocation.out.result(view, [
      `flow ${flowId} ${view.status} again: ${again.join(", ")} (watch it with flowc flow watch ${contextId} ${flowId})`,
    ]);
  },
};

/** The `<context> <caller> <job>` of a job outside any flow (its caller is the actor that submitted it). */
function loneJob(invocation: Invocation, command: string): { contextId: number; callerId: number; jobId: number } {
  const [context = "", caller = "", job = ""] = invocation.args;
  return {
    contextId: parseId(context, "<context>", command),
    callerId: parseId(caller, "<caller>", command),
    jobId: parseId(job, "<job>", command),
  };
}

const cancelJob: Command = {
  name: "job cancel",
  summary: "cancel a job run outside any flow, as a flow is cancelled (admins)",
  usage: "job cancel <context> <caller> <job> [--reason <text>]",
  args: ["context", "caller", "job"],
  options: { reason: { type: "string", help: "why (kept on the job)" } },
  details: [
    "<caller> is the actor that submitted the job (POST /v1/contexts/{id}/jobs). A job that already",
    "ended is refused (409, naming its status) and nothing changes: a cancel repeated after it",
    "succeeded too.",
  ].join("\n"),
  examples: ["flowc job cancel 1 2 7", 'flowc job cancel 1 2 7 --reason "wrong input"'],
  async run(invocation) {
    const { contextId, callerId, jobId } = loneJob(invocation, "job cancel");
    const session = await actorSession(invocation, "job cancel");
    const job = await session.client.cancelJob(contextId, callerId, jobId, invocation.options.string("reason"));
    invocation.out.result(job, [`job ${jobId} ${job.status}: ${job.error ?? "cancelled"}`]);
  },
};

const rerunJob: Command = {
  name: "job rerun",
  summary: "run a failed job outside any flow again, with fresh retries (admins)",
  usage: "job rerun <context> <caller> <job>",
  args: ["context", "caller", "job"],
  details: "A job that did not fail is refused (409, naming its status).",
  examples: ["flowc job rerun 1 2 7"],
  async run(invocation) {
    const { contextId, callerId, jobId } = loneJob(invocation, "job rerun");
    const session = await actorSession(invocation, "job rerun");
    const job = await session.client.rerunJob(contextId, callerId, jobId);
    invocation.out.result(job, [`job ${jobId} ${job.status} again (attempt ${job.live?.attempt ?? job.attempt ?? 0})`]);
  },
};

function dispatchCommand(paused: boolean): Command {
  const verb = paused ? "pause" : "resume";
  return {
    name: `context ${verb}`,
    summary: paused
      ? "hold dispatch in a context: nothing leaves for runners until resumed (admins)"
      : "let dispatch go on in a paused context (admins)",
    usage: `context ${verb} <context>`,
    args: ["context"],
    examples: [`flowc context ${verb} 1`],
    async run(invocation) {
      const { contextId, session } = await contextSession(invocation, `context ${verb}`);
      const answer = await session.client.setPaused(contextId, paused);
      invocation.out.result(answer, [`context ${contextId}: dispatch ${paused ? "paused" : "resumed"}`]);
    },
  };
}

/** The job a dead letter is about: its name, else its id (a letter may be about no job at all). */
function jobOf(letter: DeadLetter): string {
  return letter.job_key ?? (letter.job_id !== undefined ? String(letter.job_id) : "-");
}

const letters: Command = {
  name: "deadletter list",
  summary: "what the coordinator gave up on, newest first (readers)",
  usage: "deadletter list <context> [--offset <n>] [--limit <n>]",
  args: ["context"],
  options: pageOptions("dead letters"),
  examples: ["flowc deadletter list 1", "flowc deadletter list 1 --limit 5 --json"],
  async run(invocation) {
    const name = "deadletter list";
    const { contextId, session } = await contextSession(invocation, name);
    const page = await session.client.listDeadLetters(contextId, pageQuery(invocation.options, name));
    const items = page.items;
    if (items.length === 0) {
      invocation.out.result(page, [`no dead letters in context ${contextId}`]);
      return;
    }
    const rows = items.map((l) => [l.id, l.kind, jobOf(l), String(l.attempts), timestamp(l.at), l.reason]);
    invocation.out.result(page, [
      ...table(["id", "kind", "job", "attempts", "at", "reason"], rows),
      `${items.length} of ${page.total} in context ${contextId}`,
    ]);
  },
};

const letter: Command = {
  name: "deadletter show",
  summary: "one dead letter, whole (readers)",
  usage: "deadletter show <context> <id>",
  args: ["context", "id"],
  examples: ["flowc deadletter show 1 3:12:2"],
  async run(invocation) {
    const { contextId, session } = await contextSession(invocation, "deadletter show");
    const id = invocation.args[1] ?? "";
    const entry = await session.client.loadDeadLetter(contextId, id);
    const rows: [string, string][] = [
      ["id", entry.id],
      ["kind", entry.kind],
      ["flow", String(entry.flow_id)],
      ["job", jobOf(entry)],
      ["attempts", String(entry.attempts)],
      ["at", timestamp(entry.at)],
      ["reason", entry.reason],
      ...(entry.message_id !== undefined ? ([["message", String(entry.message_id)]] as [string, string][]) : []),
      ...(entry.payload !== undefined ? ([["payload", entry.payload]] as [string, string][]) : []),
    ];
    invocation.out.result(entry, fields(rows));
  },
};

const removeLetter: Command = {
  name: "deadletter delete",
  summary: "delete a dead letter once it is dealt with; one already gone is no error (admins)",
  usage: "deadletter delete <context> <id>",
  args: ["context", "id"],
  examples: ["flowc deadletter delete 1 3:12:2"],
  async run(invocation) {
    const { contextId, session } = await contextSession(invocation, "deadletter delete");
    const id = invocation.args[1] ?? "";
    await session.client.deleteDeadLetter(contextId, id);
    invocation.out.result({ deleted: true, id }, [`dead letter ${id} deleted`]);
  },
};

/** `flow cancel`, `flow rerun`, and the same of a job outside any flow: `job cancel`, `job rerun`. */
export const flowRecoveryCommands: Command[] = [cancel, rerun, cancelJob, rerunJob];
/** `context pause`, `context resume`. */
export const dispatchCommands: Command[] = [dispatchCommand(true), dispatchCommand(false)];
/** `deadletter list`, `deadletter show`, `deadletter delete`. */
export const deadLetterCommands: Command[] = [letters, letter, removeLetter];
