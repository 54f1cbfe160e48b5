import { formatMs } from "../../shared/model/durations.js";
import type { JobView } from "../../shared/model/index.js";
import { jobWords } from "./status-words.js";

/**
 * How the console words a job that is more than a script: what a wait waits for and how long it
 * has left, until when a sleep sleeps, why a job was skipped, and its flow's rules (`when`,
 * `needs`, `allow_failure`). Shared by the DAG's nodes and the job panel, so both say the same.
 */

/** What these texts read of a job. */
export type JobWords = Pick<
  JobView,
  "key" | "kind" | "status" | "wait" | "sleep_until" | "skip_reason" | "when" | "needs" | "allow_failure" | "waiting"
> &
  Partial<
    Pick<
      JobView,
      "result" | "error" | "compensates" | "map" | "instances" | "started_at_ms" | "ended_at_ms" | "duration_ms"
    >
  >;

/** The key of the job a compensation undoes: its own name is that key and `.compensate`. */
export function undoneKey(job: Pick<JobView, "key">): string {
  return job.key.replace(/\.compensate$/, "");
}

/** The badge of a job that runs no script. */
export const KIND_BADGE: Record<JobView["kind"], string> = {
  script: "",
  wait: "⏸ wait",
  sleep: "☾ sleep",
  flow: "⇣ flow",
  map: "⧉ map: one instance per item of a list",
};

/** What a map maps over and how far its instances are: `over list.files`, `2 of its 4 instances left`. */
function mapLine(job: JobWords): string {
  if (job.status === "started" && job.waiting?.reason === "map") return job.waiting.detail.replace(/^waiting for /, "");
  const count = job.instances?.length;
  return count !== undefined ? `${count} instances · over ${job.map?.over ?? "?"}` : `over ${job.map?.over ?? "?"}`;
}

/** What each `needs` means, for the job panel. */
export const NEEDS_MEANING: Record<NonNullable<JobView["needs"]>, string> = {
  all_finished: "runs once every dependency finished (skipped if one did not)",
  all_done: "runs once every dependency ended, however it ended (a clean-up)",
  any_finished: "runs as soon as one dependency finished (skipped if none did)",
  none_failed: "runs once every dependency ended and none failed (skipped ones allowed)",
};

/** Whether a job has rules of its own: `when`, `needs` or `allow_failure`. */
export function hasRules(job: Pick<JobView, "when" | "needs" | "allow_failure">): boolean {
  return job.when !== undefined || job.needs !== undefined || job.allow_failure === true;
}

/** The job's rules in one short line: `when: …`, `needs: any_finished`, `may fail`. */
export function rulesLine(job: Pick<JobView, "when" | "needs" | "allow_failure">): string {
  return [
    job.when !== undefined ? `when: ${job.when}` : undefined,
    job.needs !== undefined ? `needs: ${job.needs}` : undefined,
    job.allow_failure ? "may fail" : undefined,
  ]
    .filter(Boolean)
    .join(" · ");
}

/** How long until an instant (epoch seconds), coarsely: `45 s`, `12 min`, `2 h 05 min`, `3 d 4 h`. */
export function timeLeft(until: number, now = Date.now() / 1000): string {
  const s = Math.floor(until - now);
  if (s <= 0) return "due now";
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

const clock = new Intl.DateTimeFormat(undefined, { timeStyle: "short" });
const dayClock = new Intl.DateTimeFormat(undefined, { dateStyle: "short", timeStyle: "short" });

/** An instant (epoch seconds) as a short local time, with the date when it is not today. */
export function shortTime(epochSeconds: number): string {
  const date = new Date(epochSeconds * 1000);
  return date.toDateString() === new Date().toDateString() ? clock.format(date) : dayClock.format(date);
}

/** What a wait waits for: `order.paid · 42`, and while it waits, `· 12 min left`. */
function waitLine(job: JobWords): string {
  const wait = job.wait;
  if (!wait) return "an event";
  const what = wait.key === "" ? wait.event : `${wait.event} · ${wait.key}`;
  const until = job.status === "started" ? job.waiting?.until : undefined;
  return until === undefined ? what : `${what} · ${timeLeft(until)} left`;
}

/** Until when a sleep sleeps: `until 14:05 · 2 min left`, or, once over, `slept until 14:05`. */
function sleepLine(job: JobWords): string {
  const until = job.sleep_until ?? (job.status === "started" ? job.waiting?.until : undefined);
  if (job.status === "started" && until !== undefined) return `until ${shortTime(until)} · ${timeLeft(until)} left`;
  const slept = job.result?.slept_until;
  if (job.status === "finished" && slept) return `slept until ${shortTime(Date.parse(slept) / 1000)}`;
  return until !== undefined ? `until ${shortTime(until)}` : "not started";
}

/**
 * A node's third line: why it was skipped (its status line says that it was); what a wait waits for; until when a sleep sleeps; a
 * script's rules. Undefined when there is nothing more to say than its status.
 */
export function detailLine(job: JobWords): string | undefined {
  if (job.status === "skipped") return job.skip_reason || "by its flow's rules";
  if (job.compensates !== undefined) return `undoes ${undoneKey(job)}`;
  if (job.status === "error" && job.kind !== "script" && job.error) return job.error;
  if (job.kind === "wait") return waitLine(job);
  if (job.kind === "sleep") return sleepLine(job);
  if (job.kind === "map") return mapLine(job);
  return hasRules(job) ? rulesLine(job) : undefined;
}

/** What a job's status line reads: its kind, status and attempt, and what its plain word needs. */
export type StatusFacts = Pick<JobView, "kind" | "status" | "attempt"> &
  Partial<Pick<JobView, "error" | "skip_reason">>;

/**
 * The status as a node writes it, in plain words (status-words.ts): a started wait waits for its
 * event, a started sleep for its time (they hold no runner), a map maps; a script's attempt after
 * its first.
 */
export function statusLine(job: StatusFacts): string {
  const word = jobWords(job).word;
  if (job.status === "started" && job.kind === "wait") return "waiting for its event";
  if (job.status === "started" && job.kind === "sleep") return "waiting for its time";
  if (job.status === "started" && job.kind === "map") return "running · mapping";
  return job.attempt > 1 && job.kind === "script" ? `${word} · attempt ${job.attempt}` : word;
}

/** What a job's time is read from: its kind, status and times to the millisecond. */
export type TimeFacts = Pick<JobView, "status" | "kind"> &
  Partial<Pick<JobView, "started_at_ms" | "ended_at_ms" | "duration_ms">>;

/**
 * How long a job ran (`420 ms`), or has been running (`3.4 s`, as of `now`); "" for a job that
 * has not begun, or never ran. A wait or a sleep under way says how long it has left instead
 * (its third line), which tells more than how long it has waited.
 */
export function timeText(job: TimeFacts, now = Date.now()): string {
  if (job.duration_ms !== undefined && job.ended_at_ms !== undefined) return formatMs(job.duration_ms);
  if (job.kind === "wait" || job.kind === "sleep") return "";
  if (job.status === "started" && job.started_at_ms !== undefined)
    return formatMs(Math.max(0, now - job.started_at_ms));
  return "";
}

/** Everything a node's tooltip says: name and id, kind, status, what it waits for, why skipped, rules. */
export function tooltip(job: JobWords & Pick<JobView, "id" | "attempt">): string {
  const kind =
    job.kind === "wait"
      ? `waits for event ${job.wait?.event ?? "?"}${job.wait?.key ? ` with key ${JSON.stringify(job.wait.key)}` : ""}`
      : job.kind === "sleep"
        ? "sleeps (takes no runner)"
        : job.kind === "map"
          ? `maps its script over ${job.map?.over ?? "a list"}: one instance per item`
          : undefined;
  const until = job.waiting?.until;
  return [
    `${job.key} (job ${job.id})`,
    kind,
    job.compensates !== undefined
      ? `compensation: undoes ${undoneKey(job)} (job ${job.compensates}) if the flow unwinds`
      : undefined,
    `status: ${statusLine(job)}${timeText(job) ? ` · ${job.status === "started" ? "running for " : "ran "}${timeText(job)}` : ""}`,
    job.waiting
      ? `${job.waiting.detail}${until !== undefined ? ` until ${shortTime(until)} (${timeLeft(until)} left)` : ""}`
      : undefined,
    job.skip_reason !== undefined ? `skipped: ${job.skip_reason}` : undefined,
    hasRules(job) ? `rules: ${rulesLine(job)}` : undefined,
  ]
    .filter(Boolean)
    .join("\n");
}
