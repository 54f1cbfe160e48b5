import type { FlowStreamEvent, FlowView, JobView } from "../../shared/model/index.js";
import { runsIn } from "../support/flow-runs.js";
import type { FlowPlan } from "./shapes.js";

// The soak's sagas, judged from their final views, their streams and the runners' own lines:
// how each unwound (or did not need to), independently of the coordinator's code.

/** What one check found: whether it held, and what was seen. */
export interface Found {
  held: boolean;
  detail: string;
}

interface Saga {
  flowId: number;
  plan: FlowPlan;
  final: FlowView;
  stream: FlowStreamEvent[];
}

const TERMINAL = new Set(["job.finished", "job.error", "job.skipped"]);

/** The jobs of the plan downstream of `name` (its dependents, transitively). */
function downstream(plan: FlowPlan, name: string): Set<string> {
  const out = new Set<string>();
  const pending = [name];
  while (pending.length > 0) {
    const at = pending.pop() as string;
    for (const j of plan.jobs) {
      const me = j.name as string;
      if (!out.has(me) && (j.depends ?? []).map(String).includes(at)) {
        out.add(me);
        pending.push(me);
      }
    }
  }
  return out;
}

/** The problems of one saga's end; `runs` counts each job's attempts begun at the runners. */
function judgeSaga({ flowId, plan, final, stream }: Saga, runs: Map<string, number>): string[] {
  const wrong: string[] = [];
  const say = (what: string) => wrong.push(`flow ${flowId} ${final.status}: ${what}`);
  const byKey = new Map(final.jobs.map((j) => [j.key, j]));
  const compensations = final.jobs.filter((j) => j.compensates !== undefined);
  const seqOf = (job: JobView, types: Set<string>) => stream.find((e) => e.job_id === job.id && types.has(e.type))?.seq;
  const unwound = stream.find((e) => e.type === "flow.compensating" || e.status === "compensating")?.seq;
  for (const name of plan.compensated) {
    const comp = byKey.get(`${name}.compensate`);
    const target = byKey.get(name);
    if (!comp || !target || comp.compensates !== target.id) {
      say(`job ${name} has no compensation named ${name}.compensate in its view`);
      continue;
    }
    const ran = runs.get(`${flowId}:${comp.key}`) ?? 0;
    if (ran > (plan.jobs.find((j) => j.name === name)?.compensate?.retries ?? 0) + 1)
      say(`compensation ${comp.key} ran ${ran} times`);
    if (ran > 0 && target.status !== "finished") say(`compensation ${comp.key} ran, but ${name} is ${target.status}`);
    if (final.status === "finished" && (ran > 0 || comp.skip_reason !== "not needed: the flow finished"))
      say(`compensation ${comp.key} is ${comp.status} (${comp.skip_reason}) in a flow that finished, ran ${ran}`);
    const first = seqOf(comp, new Set(["job.ready", "job.dispatched"]));
    if (first === undefined) continue;
    if (unwound === undefined || first < unwound) say(`compensation ${comp.key} ran before the flow unwound`);
    // Reverse order: the compensations of the jobs downstream ended before, and none failed.
    for (const later of downstream(plan, name)) {
      const other = byKey.get(`${later}.compensate`);
      if (!other) continue;
      const ended = seqOf(other, TERMINAL);
      if (ended === undefined || ended > first) say(`compensation ${comp.key} ran before ${other.key} ended`);
      if (other.status === "error") say(`compensation ${comp.key} ran though ${other.key} failed`);
    }
  }
  const failedOnes = compensations.filter((j) => j.status === "error").map((j) => j.key);
  const expected =
    final.status === "finished" ? "finished" : failedOnes.length > 0 ? "compensation_failed" : "compensated";
  if (final.status !== expected) say(`ended ${final.status}, its compensations say ${expected}`);
  if (JSON.stringify(final.error?.failed_compensations ?? []) !== JSON.stringify(failedOnes))
    say(
      `names ${final.error?.failed_compensations?.join(", ") ?? "none"} as failed compensations, not ${failedOnes.join(", ")}`,
    );
  for (const comp of compensations)
    if (
      comp.key.endsWith("-broken.compensate") &&
      (runs.get(`${flowId}:${comp.key}`) ?? 0) > 0 &&
      comp.status !== "error"
    )
      say(`broken compensation ${comp.key} ran and is ${comp.status}`);
  return wrong;
}

/**
 * Every saga unwound as promised: a compensation ran at most retries + 1 times (counted at the
 * runners), only for a job that finished, never before its flow unwound, only after the
 * compensations of every job downstream of its own had ended (and none of them failed); a saga
 * that finished ran none (each skipped as not needed); one that failed ended compensated, or
 * compensation_failed naming exactly the compensations in error; no saga stayed unwinding.
 */
export function sagasUnwound(
  flows: { view: FlowView; plan: FlowPlan }[],
  finals: Map<number, FlowView>,
  streams: Map<number, FlowStreamEvent[]>,
  outputs: string[],
): Found {
  const runs = new Map<string, number>();
  for (const r of runsIn(...outputs)) runs.set(`${r.flow}:${r.job}`, (runs.get(`${r.flow}:${r.job}`) ?? 0) + 1);
  const wrong: string[] = [];
  const counts = { sagas: 0, finished: 0, compensated: 0, failed: 0, ran: 0, cancelled: 0 };
  for (const { view, plan } of flows) {
    const final = finals.get(view.id);
    if (plan.compensated.length === 0 || !final) continue;
    counts.sagas++;
    if (final.status === "finished") counts.finished++;
    if (final.status === "compensated") counts.compensated++;
    if (final.status === "compensation_failed") counts.failed++;
    if (final.error?.job === 0) counts.cancelled++;
    counts.ran += final.jobs.filter(
      (j) => j.compensates !== undefined && (runs.get(`${view.id}:${j.key}`) ?? 0) > 0,
    ).length;
    wrong.push(...judgeSaga({ flowId: view.id, plan, final, stream: streams.get(view.id) ?? [] }, runs));
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `${counts.sagas} sagas: ${counts.finished} finished, ${counts.compensated} compensated, ${counts.failed} compensation_failed (${counts.cancelled} cancelled with compensate); ${counts.ran} compensations ran`,
  };
}
