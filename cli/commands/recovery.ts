import type { DeadLetter } from "../../shared/model/index.js";
import { isIdText } from "../../shared/model/index.js";
import { pageOptions, pageQuery, parseCount, parseId, parsePairs, type Command, type Invocation } from "../command.js";
import { fields, table, timestamp } from "../output.js";
import { actorSession, contextSession, objectSession } from "../session.js";
import { watchToEnd } from "../watch.js";
import { flowWord, flowWords, jobWords, plainText } from "../plain.js";

/** Cancel and re-run flows (and jobs outside flows), pause and resume dispatch, read the dead letters. */

const cancel: Command = {
  name: "flow cancel",
  summary: "cancel a flow: nothing more runs, runners of jobs in flight are told to stop (admins)",
  usage: "flow cancel <context> <flow> [--reason <text>] [--compensate]",
  args: ["context", "flow"],
  options: {
    reason: { type: "string", help: "why (kept on the flow and its jobs)" },
    compensate: {
      type: "boolean",
      help: "unwind it: the compensations of its jobs that finished run, in reverse order",
    },
  },
  details: [
    "A flow that already ended is refused (409, naming its status) and nothing changes: a cancel",
    "repeated after it succeeded too. A failed flow whose other jobs still run is cancelled: they stop.",
    "With --compensate a flow whose jobs declare compensate: unwinds (compensating), then ends",
    "compensated or compensation_failed (watch it with flowc flow watch); repeated, nothing changes.",
  ].join("\n"),
  examples: [
    "flowc flow cancel 1 3",
    'flowc flow cancel 1 3 --reason "wrong input"',
    "flowc flow cancel 1 3 --compensate && flowc flow watch 1 3",
  ],
  async run(invocation) {
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", "flow cancel");
    const reason = invocation.options.string("reason");
    const compensate = invocation.options.flag("compensate");
    const view = await session.client.cancelFlow(contextId, flowId, reason, compensate);
    const words = flowWords(view);
    // A cancel that unwinds says why it unwinds: the cancel's reason.
    const why = words.why === undefined && view.error ? `: ${view.error.reason}` : "";
    invocation.out.result(view, [`flow ${flowId} ${plainText(words)}${why}`]);
  },
};

const rerun: Command = {
  name: "flow rerun",
  summary: "run a flow again: a failed one from its failed jobs, or one that ended from a job (admins)",
  usage: "flow rerun <context> <flow> [--from <job>] [--env <NAME=value>]... [--run <n>] [--watch]",
  args: ["context", "flow"],
  options: {
    from: { type: "string", value: "<job>", help: "re-run from this job (name or id): it and everything downstream" },
    env: {
      type: "string",
      multiple: true,
      value: "<NAME=value>",
      help: "set a variable of the flow's env from this run on (INPUT_<NAME> changes an input)",
    },
    run: {
      type: "string",
      value: "<n>",
      help: "the run to replace (default with --from: the flow's run as read now); another is refused",
    },
    watch: { type: "boolean", help: "then watch it to its end, as flowc flow watch does (exit 1 if it errors)" },
  },
  details: [
    "Without --from, a failed flow runs again from its failed jobs (and those skipped because of them),",
    "one whose unwinding failed (compensation_failed) from its failed compensations;",
    "finished jobs keep their results. With --from, a flow that ended (finished or error) runs again from",
    "that job: it and every job downstream of it, whatever their status; what is upstream keeps its",
    "result (a failed flow's failures run again too). --env sets variables over the flow's env for this",
    "run and the next ones: a template's inputs are its INPUT_<NAME> variables, so --env INPUT_X=... changes",
    "input X. Each re-run is the flow's next run (flow show says which). With --from, the run it replaces is",
    "sent with it (read from the flow first, or --run): the same command again after it was applied is",
    "refused (409: the flow is at another run), never run twice; give --run to make a script's retry safe.",
  ].join("\n"),
  examples: [
    "flowc flow rerun 1 3",
    "flowc flow rerun 1 3 --from build --env INPUT_VERSION=1.2.4 --watch",
    "flowc flow rerun 1 3 --from 12 --run 2",
  ],
  async run(invocation) {
    const name = "flow rerun";
    const { options } = invocation;
    const { contextId, id: flowId, session } = await objectSession(invocation, "<flow>", name);
    const from = options.string("from");
    const runText = options.string("run");
    const env = parsePairs(options.list("env"), "--env", name);
    const ask = {
      ...(from !== undefined ? { from: isIdText(from) ? Number(from) : from } : {}),
      ...(Object.keys(env).length > 0 ? { env_vars: env } : {}),
    };
    let run = runText === undefined ? undefined : parseCount(runText, "--run", name, 1);
    if (run === undefined && from !== undefined) run = (await session.client.loadFlow(contextId, flowId)).run;
    const view = await session.client.rerunFlow(contextId, flowId, { ...ask, ...(run !== undefined ? { run } : {}) });
    // A flow that failed to unwind unwinds again: its compensations are what runs again then.
    const unwinds = view.status === "compensating";
    const again = view.jobs
      .filter((j) => j.status !== "finished" && j.status !== "error" && unwinds === (j.compensates !== undefined))
      .map((j) => j.key);
    const line = `flow ${flowId} ${flowWord(view)} again, run ${view.run}${from !== undefined ? ` from ${from}` : ""}: ${again.join(", ") || "nothing left to run"}`;
    if (!options.flag("watch")) {
      invocation.out.result(view, [`${line} (watch it with flowc flow watch ${contextId} ${flowId})`]);
      return;
    }
    invocation.out.line(line);
    return watchToEnd(session.client, contextId, flowId, invocation.out);
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
    const attempt = job.live?.attempt ?? job.attempt ?? 0;
    const words = jobWords({ status: job.status, attempt, error: job.error ?? "cancelled" });
    invocation.out.result(job, [`job ${jobId} ${plainText(words)}`]);
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
    const attempt = job.live?.attempt ?? job.attempt ?? 0;
    invocation.out.result(job, [
      `job ${jobId} ${jobWords({ status: job.status, attempt }).word} again (attempt ${attempt})`,
    ]);
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
