import type { Keys } from "../../shared/keys.js";
import type { FlowView } from "../../shared/model/index.js";
import type { Redis } from "../../shared/store/redis.js";
import { runsIn } from "../support/flow-runs.js";
import type { FlowPlan } from "./shapes.js";

// The soak's sagas, judged from their final views, Redis's records and the runners' own lines:
// how each unwound (or did not need to), independently of the coordinator's code. The order is
// judged from the records (a compensation's first attempt's message is created when it is
// dispatched, a job's ended_at is written with its end), not from the stream: after a commit whose
// outcome was unknown the stream catches up with one event per job, in the flow's order, which is
// not the order things happened in.

/** What one check found: whether it held, and what was seen. */
export interface Found {
  held: boolean;
  detail: string;
}

interface Saga {
  flowId: number;
  plan: FlowPlan;
  final: FlowView;
  /** When (epoch seconds) each compensation's first attempt was dispatched, and each job ended. */
  times: Map<number, { dispatched?: number; ended?: number }>;
}

/** Where Redis's records are read from. */
export interface Records {
  redis: Redis;
  keys: Keys;
  ctx: number;
}

/** When the flow's compensations were first dispatched and its jobs ended, from their records. */
async function timesOf({ redis, keys, ctx }: Records, final: FlowView): Promise<Saga["times"]> {
  const times: Saga["times"] = new Map();
  for (const job of final.jobs) {
    const record = keys.job(ctx, final.caller_id, job.id);
    const [base, floor, ended] = await redis.exec<(string | null)[]>([
      "HMGET",
      record,
      "message_base",
      "attempt_floor",
      "ended_at",
    ]);
    const first = base === null ? undefined : Number(base) + Number(floor ?? 0);
    const created =
      job.compensates !== undefined && job.attempt > 0 && first !== undefined
        ? await redis.exec<string | null>(["HGET", keys.message(ctx, final.caller_id, first), "created_at"])
        : null;
    times.set(job.id, {
      ...(created !== null ? { dispatched: Number(created) } : {}),
      ...(ended !== null && ended !== undefined ? { ended: Number(ended) } : {}),
    });
  }
  return times;
}

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
function judgeSaga({ flowId, plan, final, times }: Saga, runs: Map<string, number>): string[] {
  const wrong: string[] = [];
  const say = (what: string) => wrong.push(`flow ${flowId} ${final.status}: ${what}`);
  const byKey = new Map(final.jobs.map((j) => [j.key, j]));
  const compensations = final.jobs.filter((j) => j.compensates !== undefined);
  const unwound = final.compensating_at;
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
    if (comp.attempt === 0) continue;
    const first = times.get(comp.id)?.dispatched;
    if (first === undefined) say(`compensation ${comp.key} ran, but its first attempt's message is not there`);
    else if (unwound === undefined || first < unwound) say(`compensation ${comp.key} ran before the flow unwound`);
    // Reverse order: the compensations of the jobs downstream ended before (within the second
    // the records keep), and none failed.
    for (const later of downstream(plan, name)) {
      const other = byKey.get(`${later}.compensate`);
      if (!other) continue;
      const ended = times.get(other.id)?.ended;
      if (first !== undefined && (ended === undefined || ended > first))
        say(`compensation ${comp.key} ran (at ${first}) before ${other.key} ended (at ${ended})`);
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
export async function sagasUnwound(
  flows: { view: FlowView; plan: FlowPlan }[],
  finals: Map<number, FlowView>,
  records: Records,
  outputs: string[],
): Promise<Found> {
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
    const times = await timesOf(records, final);
    wrong.push(...judgeSaga({ flowId: view.id, plan, final, times }, runs));
  }
  return {
    held: wrong.length === 0,
    detail:
      wrong.length > 0
        ? wrong.slice(0, 5).join("; ")
        : `${counts.sagas} sagas: ${counts.finished} finished, ${counts.compensated} compensated, ${counts.failed} compensation_failed (${counts.cancelled} cancelled with compensate); ${counts.ran} compensations ran`,
  };
}
