import type { FlowStreamEvent, FlowView, JobView } from "../../shared/model/index.js";
import type { FlowPlan, WaitPlan } from "./shapes.js";
import type { Send } from "./traffic.js";

// The invariants of waits and events, judged from the flows' final views, their streams, and
// every send the traffic made (traffic.ts). Each is a function returning what it found.

/** What one invariant found: whether it held and what was seen (invariants.ts names them). */
export interface Found {
  held: boolean;
  detail: string;
}

/** A fault's span, for the time a wait's timeout or a sleep's end may have been held up by it. */
export interface FaultSpan {
  from: number;
  to: number;
  what: string;
}

/** What the reactions' invariants read. */
export interface Reactions {
  flows: { view: FlowView; plan: FlowPlan }[];
  finals: Map<number, FlowView>;
  streams: Map<number, FlowStreamEvent[]>;
  sends: Send[];
  faults: FaultSpan[];
}

/**
 * One wait of an ended flow: its plan, its final view, what its flow's stream told of it, and its
 * resolved key as its start told it (`job.wait_started`'s `event_key`; the planned key for one
 * that never started). Not the view's `wait.key`: once a wait ended, a view of its flow rebuilt
 * from storage shows the key's template (the resolved key is not kept in the job's record).
 */
interface WaitSeen {
  flowId: number;
  plan: WaitPlan;
  job: JobView;
  key: string;
  started: FlowStreamEvent[];
  terminal: FlowStreamEvent[];
}

const TERMINAL = new Set(["job.finished", "job.error", "job.skipped"]);
/** Slack for the clocks of the soak and the Worker (one machine) and the alarm's precision. */
const SLACK_MS = 1_000;
/** A wait took no event sent this long before it started (the context keeps events 30 s). */
export const LOOKBACK_S = 30;

function waitsOf(r: Reactions): WaitSeen[] {
  const seen: WaitSeen[] = [];
  for (const { view, plan } of r.flows) {
    const final = r.finals.get(view.id);
    const stream = r.streams.get(view.id);
    if (!final || !stream) continue;
    for (const w of plan.waits) {
      const job = final.jobs.find((j) => j.key === w.job) as JobView;
      const own = stream.filter((e) => e.job_id === job.id);
      const started = own.filter((e) => e.type === "job.wait_started");
      const terminal = own.filter((e) => TERMINAL.has(e.type));
      seen.push({ flowId: view.id, plan: w, job, key: started[0]?.event_key ?? w.key, started, terminal });
    }
  }
  return seen;
}

const answered = (s: Send) => s.tries.flatMap((t) => (t.answer ? [{ ...t, answer: t.answer }] : []));
const timedOut = (w: WaitSeen) => /^timed out: no event/.test(w.job.error ?? w.job.skip_reason ?? "");

/**
 * Every wait ends exactly once: its flow's stream tells one end of it (job.finished, job.error or
 * job.skipped), the one its view shows, and at most one start, for its event and the key it was
 * planned to resolve to; one that took an event or timed out started once, before that end.
 */
export function everyWaitEndedOnce(r: Reactions): Found {
  const wrong: string[] = [];
  const waits = waitsOf(r);
  for (const w of waits) {
    const at = `flow ${w.flowId} wait ${w.plan.job} (${w.job.status})`;
    if (w.terminal.length !== 1)
      wrong.push(`${at}: its stream tells ${w.terminal.length} ends: ${w.terminal.map((e) => e.type).join(", ")}`);
    else if (w.terminal[0]?.status !== w.job.status) wrong.push(`${at}: its stream ends it ${w.terminal[0]?.status}`);
    if (w.started.length > 1) wrong.push(`${at}: started ${w.started.length} times`);
    if (w.started.some((e) => e.event_name !== w.plan.event || e.event_key !== w.plan.key))
      wrong.push(
        `${at}: started waiting for ${w.started[0]?.event_name} key ${w.started[0]?.event_key}, planned ${w.plan.event} key ${w.plan.key}`,
      );
    const waited = w.job.status === "finished" || timedOut(w);
    if (waited && (w.started.length !== 1 || (w.started[0]?.seq ?? 0) > (w.terminal[0]?.seq ?? 0)))
      wrong.push(`${at}: ended by an event or its timeout with ${w.started.length} starts before`);
  }
  const count = (f: (w: WaitSeen) => boolean) => waits.filter(f).length;
  const unread = r.flows.filter((f) => f.plan.waits.length > 0 && !r.streams.has(f.view.id)).length;
  return {
    held: wrong.length === 0 && unread === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : unread > 0
          ? `${unread} flows with waits have no stream read (see the streams' invariant)`
          : `${waits.length} waits: ${count((w) => w.job.status === "finished")} took an event, ${count(timedOut)} timed out (${count((w) => timedOut(w) && w.job.status === "skipped")} of them skipped), ${count((w) => w.started.length === 0)} never started (skipped or stopped by their flow's rules)`,
  };
}

/**
 * A wait that took an event took one sent for it: the event id in its result was sent with its
 * name and its resolved key (never a wrong key's), its data is that event's, and it was sent
 * before the wait ended.
 */
export function waitTookItsEvent(r: Reactions): Found {
  const wrong: string[] = [];
  const byId = new Map<string, Send[]>();
  for (const s of r.sends) byId.set(s.id, [...(byId.get(s.id) ?? []), s]);
  let took = 0;
  for (const w of waitsOf(r)) {
    if (w.job.status !== "finished") continue;
    took++;
    const at = `flow ${w.flowId} wait ${w.plan.job} (key ${w.key})`;
    const id = w.job.result?.event_id ?? "";
    const sent = byId.get(id) ?? [];
    const first = Math.min(...sent.flatMap((s) => s.tries.map((t) => t.startMs)));
    const endedAt = w.terminal[0]?.at_ms ?? Infinity;
    if (sent.length === 0) wrong.push(`${at} took event ${id}, which the soak never sent`);
    else if (sent.some((s) => s.name !== w.plan.event || s.key !== w.key))
      wrong.push(`${at} took event ${id}, sent as ${sent.map((s) => `${s.name} key ${s.key} (${s.kind})`).join(", ")}`);
    else if (w.job.result?.decision !== sent[0]?.data.decision)
      wrong.push(`${at} has decision ${w.job.result?.decision}, event ${id} said ${sent[0]?.data.decision}`);
    else if (first > endedAt + SLACK_MS)
      wrong.push(`${at} finished at ${endedAt}, before event ${id} was first sent at ${first}`);
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0 ? wrong.slice(0, 5).join("; ") : `${took} waits each took an event sent for their name and key`,
  };
}

/**
 * Events for a key no wait has, and events sent after their wait ended, resumed nothing; the
 * same id sent again after an answer is a duplicate; no send was refused (only 503 or an
 * unreachable Worker, tried again with the same id).
 */
export function strayEventsResumedNothing(r: Reactions): Found {
  const wrong: string[] = [];
  const byId = new Map<string, Send[]>();
  for (const s of r.sends) byId.set(s.id, [...(byId.get(s.id) ?? []), s]);
  for (const s of r.sends) {
    for (const t of answered(s)) {
      if (s.kind === "wrong" && (t.answer.matched !== 0 || t.answer.resumed !== 0))
        wrong.push(`event ${s.id} for wrong key ${s.key} matched ${t.answer.matched}, resumed ${t.answer.resumed}`);
      if (s.kind === "late" && t.answer.resumed !== 0)
        wrong.push(`event ${s.id} sent after wait ${s.wait} ended resumed ${t.answer.resumed}`);
      const before = (byId.get(s.id) ?? []).flatMap(answered).some((o) => o.endMs < t.startMs);
      if (before && !t.answer.duplicate) wrong.push(`event ${s.id} sent again after an answer is no duplicate`);
    }
    const refused = s.tries.filter((t) => t.error !== undefined && t.error !== "503" && !/fetch failed/.test(t.error));
    if (refused.length > 0) wrong.push(`event ${s.id} refused: ${refused.map((t) => t.error).join(", ")}`);
  }
  const tries = r.sends.flatMap((s) => s.tries);
  const kinds = ["right", "early", "late", "wrong"].map((k) => `${r.sends.filter((s) => s.kind === k).length} ${k}`);
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `${r.sends.length} events sent (${kinds.join(", ")}) in ${tries.length} tries, ${tries.filter((t) => t.answer).length} answered, ${tries.filter((t) => t.answer?.duplicate).length} duplicates`,
  };
}

/**
 * The answers' `resumed` add up to the waits events ended. Strictly per wait: the answers for
 * its name and key resumed it at most once, and not at all unless it took an event; the event it
 * took was answered resumed once, unless that event was kept for it (sent before it started:
 * every answer matched nothing) or an answer for it was lost (a try with no answer may be the one
 * that resumed it, and the same id again answers resumed 0). Summed: resumed = waits that took an
 * event sent while they waited − those whose resuming answer was lost.
 */
export function resumedAddsUp(r: Reactions): Found {
  const wrong: string[] = [];
  const resumed = r.sends.flatMap(answered).reduce((n, t) => n + t.answer.resumed, 0);
  let byEvent = 0;
  let kept = 0;
  let lost = 0;
  for (const w of waitsOf(r)) {
    const mine = r.sends.filter((s) => s.name === w.plan.event && s.key === w.key);
    const total = mine.flatMap(answered).reduce((n, t) => n + t.answer.resumed, 0);
    const at = `flow ${w.flowId} wait ${w.plan.job} (${w.job.status})`;
    if (total > 1) wrong.push(`${at}: answers resumed it ${total} times`);
    if (w.job.status !== "finished") {
      if (total > 0) wrong.push(`${at}: an answer resumed it, but it took no event`);
      continue;
    }
    const took = mine.filter((s) => s.id === w.job.result?.event_id);
    const tookAnswers = took.flatMap(answered);
    const tookResumed = tookAnswers.reduce((n, t) => n + t.answer.resumed, 0);
    if (total !== tookResumed)
      wrong.push(`${at}: took ${w.job.result?.event_id}, but another event's answer resumed it`);
    if (tookResumed === 1) byEvent++;
    else if (tookResumed > 1)
      continue; // said above: resumed more than once
    else if (tookAnswers.length > 0 && tookAnswers.every((t) => t.answer.matched === 0)) kept++;
    else if (took.some((s) => s.tries.some((t) => !t.answer))) lost++;
    else wrong.push(`${at}: took ${w.job.result?.event_id}, whose answers resumed nothing and matched it`);
  }
  return {
    held: wrong.length === 0 && resumed === byEvent,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `resumed summed over answers ${resumed} = ${byEvent} waits resumed by an answered send (${kept} more took a kept event, answered matched 0; ${lost} more by a send whose answer was lost)`,
  };
}

/**
 * No event sent to a waiting wait was lost: a wait that timed out was sent no event for its name
 * and key that was answered more than a second before it timed out, unless the event was first
 * sent more than half the look back (15 s) before the wait started (kept events age out; a start
 * delayed by an outage looks back later). An event is as old as the first try of its id: the
 * same id sent again once the wait runs (an early event offered again) is that event, a
 * duplicate, not a new one.
 */
export function noEventLost(r: Reactions): Found {
  const wrong: string[] = [];
  let checked = 0;
  let raced = 0;
  const firstTry = new Map<string, number>();
  for (const s of r.sends)
    for (const t of s.tries) firstTry.set(s.id, Math.min(firstTry.get(s.id) ?? Infinity, t.startMs));
  for (const w of waitsOf(r)) {
    if (!timedOut(w)) continue;
    checked++;
    const start = w.started[0]?.at_ms ?? 0;
    const end = w.terminal[0]?.at_ms ?? 0;
    const mine = r.sends.filter((s) => s.name === w.plan.event && s.key === w.key);
    if (mine.some((s) => s.kind === "right" && answered(s).some((t) => t.endMs >= end - SLACK_MS))) raced++;
    for (const s of mine) {
      const first = firstTry.get(s.id) ?? 0;
      if (first < start - (LOOKBACK_S * 1000) / 2) continue;
      const t = answered(s).find((t) => t.endMs < end - SLACK_MS);
      if (t)
        wrong.push(
          `flow ${w.flowId} wait ${w.plan.job} (key ${s.key}, started ${start}) timed out at ${end}, but event ${s.id} (${s.kind}, first sent at ${first}) was sent at ${t.startMs} and answered at ${t.endMs}: ${JSON.stringify(t.answer)}`,
        );
    }
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `${checked} waits timed out, none sent its event in time (${raced} were sent it as their timeout came or after)`,
  };
}

/** The time faults other than a runner's held storage or the Worker between `from` and `to`. */
function outageWithin(faults: FaultSpan[], from: number, to: number): number {
  return faults
    .filter((f) => !f.what.startsWith("runner"))
    .reduce((ms, f) => ms + Math.max(0, Math.min(f.to, to) - Math.max(f.from, from)), 0);
}

/**
 * No wait or sleep stayed stuck: a wait ended within its timeout, a sleep not before its time
 * (within 2 s: a rebuild may start it when its last dependency ended) and within it, each plus
 * the outages of storage and the Worker while it ran, and 10 s of slack; no flow needed its
 * deadline (`timeouts.flow`, its budget) to end.
 */
export function nothingStuck(r: Reactions, budgetS: number): Found {
  const wrong: string[] = [];
  let longest = 0;
  for (const { view, plan } of r.flows) {
    const final = r.finals.get(view.id);
    const stream = r.streams.get(view.id);
    if (!final) continue;
    if (/past its deadline/.test(final.error?.reason ?? ""))
      wrong.push(`flow ${view.id} ran past its budget of ${budgetS} s`);
    if (final.started_at !== undefined && final.ended_at !== undefined)
      longest = Math.max(longest, final.ended_at - final.started_at);
    for (const name of [...plan.waits.map((w) => w.job), ...plan.sleeps]) {
      const job = final.jobs.find((j) => j.key === name) as JobView;
      const own = (stream ?? []).filter((e) => e.job_id === job.id);
      const start = own.find((e) => e.type === "job.wait_started" || e.type === "job.sleep_started");
      const end = own.find((e) => TERMINAL.has(e.type));
      if (!start?.until_ms || !end) continue;
      const allowed = start.until_ms + outageWithin(r.faults, start.at_ms, end.at_ms) + 10_000;
      if (end.at_ms > allowed)
        wrong.push(
          `flow ${view.id} ${job.kind} ${name} ended at ${end.at_ms}, due at ${start.until_ms} (allowed until ${allowed})`,
        );
      if (job.kind === "sleep" && end.type === "job.finished" && end.at_ms < start.until_ms - 2 * SLACK_MS)
        wrong.push(`flow ${view.id} sleep ${name} ended at ${end.at_ms}, before its time ${start.until_ms}`);
    }
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `longest flow ${longest} s (budget ${budgetS} s); every wait and sleep ended on time`,
  };
}
