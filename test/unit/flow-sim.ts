// Helpers for the flow state machine tests: build a machine state from job inputs, and drive it
// while checking what every transition must satisfy (refused events change nothing, the state
// handed in is never mutated, nothing is dispatched early): the driver throws when one does not.
import type { z } from "zod";
import { mulberry32 } from "../support/random.js";
import {
  apply,
  FlowJobInput,
  newFlowState,
  resolveDag,
  type DagIssue,
  type DagJob,
  type FlowEffect,
  type FlowEvent,
  type FlowState,
  type FlowTimeouts,
  type JobState,
  type Transition,
} from "../../shared/flow/index.js";
import type { ResultMap } from "../../shared/model/index.js";
import { readiness } from "../../shared/flow/rules.js";

export type JobIn = z.input<typeof FlowJobInput>;

/** A job input with the required fields filled in. */
export function jobIn(fields: Partial<JobIn> = {}): JobIn {
  return { script: "echo hi", script_type: "sh", ...fields };
}

/** Parses job inputs and resolves them, ids allocated from `firstId` on: the jobs, or the issues. */
export function resolveInputs(inputs: JobIn[], firstId = 100): { jobs: DagJob[] } | { issues: DagIssue[] } {
  let next = firstId;
  return resolveDag(
    inputs.map((input) => FlowJobInput.parse(input)),
    () => next++,
  );
}

/** Parses job inputs and resolves them (ids allocated from `firstId` on); throws on issues. */
export function resolved(inputs: JobIn[], firstId = 100): DagJob[] {
  const out = resolveInputs(inputs, firstId);
  if ("issues" in out) throw new Error(`unexpected issues: ${JSON.stringify(out.issues)}`);
  return out.jobs;
}

export const TIMEOUTS: FlowTimeouts = { timeout: 300, timeout_ack: 60 };

interface FlowOptions {
  envVars?: Record<string, string>;
  timeouts?: FlowTimeouts;
  firstId?: number;
}

/** A flow of the given jobs (id 7, context 3, caller 5), status dispatched. */
export function flowOf(inputs: JobIn[], options: FlowOptions = {}): FlowState {
  return newFlowState({
    id: 7,
    contextId: 3,
    callerId: 5,
    envVars: options.envVars ?? {},
    timeouts: options.timeouts ?? TIMEOUTS,
    traceId: "0af7651916cd43dd8448eb211c80319c",
    jobs: resolved(inputs, options.firstId),
    messageBase: 1000,
  });
}

/**
 * Freezes what a transition created (the flow, its maps and every job object that is new). In a
 * large flow only the jobs in `touched` are looked at, and the jobs map is left unfrozen: V8
 * copies a frozen map of 1,000 jobs some 40 times slower, which would make the simulations crawl.
 */
function freezeNew(next: FlowState, prev?: FlowState, touched?: number[]): void {
  if (Object.isFrozen(next)) return;
  const large = next.order.length > 100;
  Object.freeze(next);
  if (!large) Object.freeze(next.jobs);
  Object.freeze(next.order);
  if (next.error) Object.freeze(next.error);
  for (const id of large && touched ? touched : next.order) {
    const job = next.jobs.job(id);
    if (prev && prev.jobs.get(id) === job) continue;
    for (const part of [job.delivery, job.deadline, job.result, job.depends, job.dependents])
      if (part) Object.freeze(part);
    Object.freeze(job);
  }
}

/**
 * Drives a flow: every transition is checked (an event not applied returns the very same state
 * and no effects; states are frozen, so a machine that mutates its input throws), and dispatch
 * effects are counted and checked against the dependencies at that moment. A check that fails
 * throws, so no test can miss it.
 */
export class Driver {
  state: FlowState;
  readonly dispatches = new Map<number, number>();
  readonly effects: FlowEffect[] = [];

  constructor(state: FlowState) {
    freezeNew(state);
    this.state = state;
  }

  send(event: FlowEvent): Transition {
    const before = this.state;
    const t = apply(before, event);
    if (t.outcome !== "applied") {
      if (t.state !== before)
        throw new Error(`flow machine: ${t.outcome} ${JSON.stringify(event)} returned a new state`);
      if (t.effects.length > 0) throw new Error(`flow machine: ${t.outcome} ${JSON.stringify(event)} had effects`);
      return t;
    }
    // Every job a transition changes is named by the event or an effect, except at start.
    const touched =
      event.type === "start"
        ? undefined
        : [...("job" in event ? [event.job] : []), ...t.effects.flatMap((e) => ("job" in e ? [e.job] : []))];
    freezeNew(t.state, before, touched);
    for (const effect of t.effects) {
      this.effects.push(effect);
      if (effect.type !== "dispatch") continue;
      this.dispatches.set(effect.job, (this.dispatches.get(effect.job) ?? 0) + 1);
      const job = t.state.jobs.job(effect.job);
      // Dispatched only once its rules let it run (rules.ts): by default, every dependency finished.
      const verdict = readiness(t.state, job);
      if (!verdict || !("run" in verdict))
        throw new Error(`flow machine: job ${effect.job} dispatched before its dependencies let it run`);
      if (job.attempt !== effect.attempt)
        throw new Error(
          `flow machine: dispatch of ${effect.job} names attempt ${effect.attempt}, job has ${job.attempt}`,
        );
    }
    this.state = t.state;
    return t;
  }

  job(id: number): JobState {
    const job = this.state.jobs.get(id);
    if (!job) throw new Error(`no job ${id}`);
    return job;
  }

  /** Runs the current attempt of a job the push way, to `finished` (or `failed` with `error`). */
  run(id: number, options: { runner?: number; at?: number; result?: ResultMap; error?: string } = {}): Transition {
    const runner = options.runner ?? 1;
    const at = options.at ?? 1_000;
    const attempt = this.job(id).attempt;
    const common = { job: id, attempt, runner };
    this.send({ type: "assigned", ...common, at });
    this.send({ type: "delivered", ...common, acknowledged: true, at: at + 1 });
    this.send({ type: "started", ...common, at: at + 2 });
    return options.error !== undefined
      ? this.send({ type: "failed", ...common, error: options.error, at: at + 3 })
      : this.send({ type: "finished", ...common, result: options.result ?? { out: String(id) }, at: at + 3 });
  }

  /** The statuses of the given jobs, in that order. */
  statusOf(ids: number[]): string[] {
    return ids.map((id) => this.job(id).status);
  }
}

/** When the example-based tests' flows start (epoch ms). */
export const T = 1_700_000_000_000;

/** A started flow of these jobs (ids from 100 on, in order), at T. */
export function started(inputs: JobIn[], options: FlowOptions = {}): Driver {
  const d = new Driver(flowOf(inputs, options));
  d.send({ type: "start", at: T });
  return d;
}

/** The jobs dispatched so far, in the order of their first dispatch. */
export const dispatched = (d: Driver): number[] => [...d.dispatches.keys()];

/** A random DAG: job i depends on some earlier jobs (near ones more often, so chains get deep). */
export interface DagShape {
  n: number;
  /** Raw picks per job, turned into earlier indexes by `dependencies`. */
  picks: number[][];
  seed: number;
}

function dependencies(shape: DagShape, i: number): number[] {
  if (i === 0) return [];
  const raw = shape.picks[i] ?? [];
  return [...new Set(raw.map((x) => (x % 2 === 0 ? i - 1 - ((x >> 1) % Math.min(i, 8)) : x % i)))];
}

/**
 * Job inputs of a shape: every third job has only an id (i + 1, so the allocator, which starts
 * at 100, has to skip given ids), the others a name and some an id too; references use the name
 * when there is one.
 */
export function shapeJobs(shape: DagShape, fields: (i: number) => Partial<JobIn> = () => ({})): JobIn[] {
  const ref = (i: number): string | number => (i % 3 === 0 ? i + 1 : `j${i}`);
  return Array.from({ length: shape.n }, (_, i) =>
    jobIn({
      ...(i % 3 !== 1 ? { id: i + 1 } : {}),
      ...(i % 3 !== 0 ? { name: `j${i}` } : {}),
      depends: dependencies(shape, i).map(ref),
      ...fields(i),
    }),
  );
}

interface SimOptions {
  /** Whether an attempt of this job fails (asked once per attempt taken by a runner). */
  fails?: (job: number, attempt: number, rnd: () => number) => boolean;
}

export interface SimReport {
  driver: Driver;
  /** Replays of events sent before that were applied. */
  wronglyApplied: string[];
  /** Jobs whose failure (runner or deadline) was applied, in order. */
  failed: number[];
}

type Plan = ((s: FlowState) => FlowEvent)[];

/**
 * Runs a started flow to the end with runners that take dispatched jobs in random order and send
 * their events out of order, replayed, from the wrong runner or for the wrong attempt.
 */
export function simulate(state: FlowState, seed: number, options: SimOptions = {}): SimReport {
  return new Simulation(state, seed, options).run();
}

/** One seeded run of simulate: the driver, what is ready, in flight and backing off, and the clock. */
class Simulation {
  private readonly rnd: () => number;
  private readonly d: Driver;
  private readonly report: SimReport;
  private readonly ready: { job: number; attempt: number }[] = [];
  private readonly inflight: Plan[] = [];
  /** Jobs waiting out a retry's backoff: their retry deadline is sent when its turn comes. */
  private readonly backingOff: number[] = [];
  private readonly sent: FlowEvent[] = [];
  private seen = 0;
  private now = 1_000_000;

  constructor(
    state: FlowState,
    seed: number,
    private readonly options: SimOptions,
  ) {
    this.rnd = mulberry32(seed);
    this.d = new Driver(state);
    this.report = { driver: this.d, wronglyApplied: [], failed: [] };
  }

  /** Starts the flow, then takes one random step at a time until nothing is left to do. */
  run(): SimReport {
    const { ready, inflight, backingOff, rnd } = this;
    this.send({ type: "start", at: this.now }, false);
    while (ready.length > 0 || inflight.length > 0 || backingOff.length > 0) {
      const r = rnd();
      if (backingOff.length > 0 && (r < 0.2 || (ready.length === 0 && inflight.length === 0))) this.retryDue();
      else if (r < 0.12 && this.sent.length > 0)
        this.send(this.sent[Math.floor(rnd() * this.sent.length)] as FlowEvent, true);
      else if (ready.length > 0 && (inflight.length === 0 || r < 0.45)) {
        const [taken] = ready.splice(Math.floor(rnd() * ready.length), 1);
        if (taken) inflight.push(this.plan(taken.job, taken.attempt));
      } else this.nextStep();
    }
    return this.report;
  }

  /** A job backing off gets its retry deadline, the clock moved to it. */
  private retryDue(): void {
    const [job] = this.backingOff.splice(Math.floor(this.rnd() * this.backingOff.length), 1) as [number];
    const due = this.d.job(job).deadline;
    if (due?.kind === "retry") {
      this.now = Math.max(this.now, due.at);
      this.send({ type: "deadline", job, attempt: due.attempt, kind: "retry", at: this.now }, false);
    }
  }

  /** The next event of a random attempt in flight. */
  private nextStep(): void {
    const i = Math.floor(this.rnd() * this.inflight.length);
    const steps = this.inflight[i] as Plan;
    const step = steps.shift();
    if (steps.length === 0) this.inflight.splice(i, 1);
    if (step) this.send(step(this.d.state), false);
  }

  private send(event: FlowEvent, replay: boolean): void {
    const { d, report } = this;
    const t = d.send(event);
    if (replay && t.outcome === "applied") report.wronglyApplied.push(JSON.stringify(event));
    if (!replay) this.sent.push(event);
    if (
      t.outcome === "applied" &&
      (event.type === "failed" || event.type === "deadline") &&
      d.job(event.job).status === "error"
    )
      report.failed.push(event.job);
    for (; this.seen < d.effects.length; this.seen++) {
      const effect = d.effects[this.seen];
      if (effect?.type === "dispatch") this.ready.push({ job: effect.job, attempt: effect.attempt });
      if (effect?.type === "attemptFailed") this.backingOff.push(effect.job);
    }
  }

  private at(): number {
    return (this.now += 1 + Math.floor(this.rnd() * 50));
  }

  /** An attempt's events as a runner would send them, sometimes shuffled, with some that must be refused. */
  private plan(job: number, attempt: number): Plan {
    const { rnd } = this;
    const runner = 1 + Math.floor(rnd() * 3);
    const ev = { job, attempt, runner };
    const push = rnd() < 0.5;
    const steps: Plan = [
      () => ({ type: "delivered", ...ev, acknowledged: push, at: this.at() }),
      ...(push ? [] : [(): FlowEvent => ({ type: "acknowledged", ...ev, at: this.at() })]),
      () => ({ type: "started", ...ev, at: this.at() }),
      ...Array.from({ length: Math.floor(rnd() * 3) }, () => (): FlowEvent => ({
        type: "heartbeat",
        ...ev,
        at: this.at(),
      })),
    ];
    steps.push(this.ending(job, attempt, runner));
    // Mostly in order; sometimes fully shuffled (started after finished, delivered after started …).
    if (rnd() < 0.3)
      for (let i = steps.length - 1; i > 0; i--) {
        const j = Math.floor(rnd() * (i + 1));
        [steps[i], steps[j]] = [steps[j] as Plan[number], steps[i] as Plan[number]];
      }
    this.addRefused(steps, job, attempt, runner);
    this.send({ type: "assigned", ...ev, at: this.at() }, false);
    return steps;
  }

  /** How the attempt ends: finished, failed, or its deadline (for some that fail). */
  private ending(job: number, attempt: number, runner: number): Plan[number] {
    const ev = { job, attempt, runner };
    const fails = this.options.fails?.(job, attempt, this.rnd) ?? false;
    const timesOut = fails && this.rnd() < 0.3;
    if (!fails)
      return () => ({ type: "finished", ...ev, result: { out: `${job}.${attempt}`, n: String(job) }, at: this.at() });
    if (!timesOut) return () => ({ type: "failed", ...ev, error: `attempt ${attempt} failed`, at: this.at() });
    return (s) => {
      const due = s.jobs.get(job)?.deadline;
      return { type: "deadline", job, attempt, kind: due?.kind ?? "result", at: due?.at ?? this.now };
    };
  }

  /** Events that must be refused: another runner, another attempt, a deadline not yet due. */
  private addRefused(steps: Plan, job: number, attempt: number, runner: number): void {
    const { rnd } = this;
    const insert = (step: Plan[number]) => steps.splice(Math.floor(rnd() * steps.length), 0, step);
    if (rnd() < 0.2) insert(() => ({ type: "finished", job, attempt, runner: runner + 10, result: {}, at: this.at() }));
    if (rnd() < 0.2) insert(() => ({ type: "started", job, attempt: attempt + 100, runner, at: this.at() }));
    if (rnd() < 0.2)
      insert((s) => {
        const due = s.jobs.get(job)?.deadline;
        return { type: "deadline", job, attempt, kind: due?.kind ?? "delivery", at: (due?.at ?? this.now) - 1 };
      });
  }
}
