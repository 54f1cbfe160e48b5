import type { MiddlewareHandler } from "hono";
import { DURATION_BUCKETS, LATENCY_BUCKETS } from "../../shared/flow/index.js";
import {
  DEAD_LETTERS_DROPPED_FIELD,
  SCRAPE_CONTEXT_LIMIT,
  type ContextFigures,
  type Counters,
} from "../../shared/store/index.js";
import type { Config } from "../core/config.js";
import { Problem } from "../core/problem.js";
import type { Figures } from "../service/figures.js";
import type { AppEnv } from "./app-env.js";

/**
 * Request counters of this isolate. Workers run many isolates, so these are one isolate's share
 * since it started, and their names say so (`coordinator_isolate_…`); every other series of
 * /metrics comes from storage and is the same whichever isolate answers.
 */
const requests = new Map<string, number>();
/**
 * When this isolate served its first request. Not taken at module load: workerd's clock reads 0
 * (1970) outside a request, which made the uptime the seconds since 1970.
 */
let started: number | undefined;

type Labels = Record<string, string | number>;

function series(name: string, labels: Labels = {}): string {
  const body = Object.entries(labels)
    .map(([k, v]) => `${k}="${String(v).replace(/["\\\n]/g, "_")}"`)
    .join(",");
  return body ? `${name}{${body}}` : name;
}

/** Counts every answered request by route and status (this isolate's). */
export const countRequests: MiddlewareHandler<AppEnv> = async (c, next) => {
  started ??= Date.now();
  await next();
  const k = series("coordinator_isolate_http_requests_total", {
    method: c.req.method,
    route: c.req.routePath,
    status: String(c.res.status),
  });
  requests.set(k, (requests.get(k) ?? 0) + 1);
};

/** Prometheus text, family by family (each family's samples together, as the format wants). */
class Exposition {
  readonly lines: string[] = [];

  family(name: string, type: "gauge" | "counter" | "histogram", help: string): this {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    return this;
  }

  sample(name: string, labels: Labels, value: number): this {
    this.lines.push(`${series(name, labels)} ${value}`);
    return this;
  }

  /** A histogram of one context from its counters: `<field>:<i>` per bucket, `<field>_ms` the sum. */
  histogram(name: string, labels: Labels, counters: Counters, field: string, bounds: readonly number[]): void {
    let count = 0;
    bounds.forEach((le, i) => {
      count += counters[`${field}:${i}`] ?? 0;
      this.sample(`${name}_bucket`, { ...labels, le }, count);
    });
    count += counters[`${field}:${bounds.length}`] ?? 0;
    this.sample(`${name}_bucket`, { ...labels, le: "+Inf" }, count);
    this.sample(`${name}_sum`, labels, (counters[`${field}_ms`] ?? 0) / 1000);
    this.sample(`${name}_count`, labels, count);
  }
}

/** One sample per context: `value` of each. */
function perContext(out: Exposition, name: string, contexts: ContextFigures[], value: (c: ContextFigures) => number) {
  for (const c of contexts) out.sample(name, { context: c.id }, value(c));
}

/**
 * /metrics as Prometheus text (version 0.0.4): the figures read from storage, the same whichever
 * isolate answers, then this isolate's own series (`coordinator_isolate_…`).
 */
export function renderMetrics(figures: Figures): string {
  const out = new Exposition();
  globalFigures(out, figures);
  contextGauges(out, figures);
  contextCounters(out, figures.perContext);
  sweepCounters(out, figures.counters);
  isolateFigures(out);
  return `${out.lines.join("\n")}\n`;
}

/** One series without labels. */
function global(out: Exposition, name: string, type: "gauge" | "counter", help: string, value: number): void {
  out.family(name, type, help).sample(name, {}, value);
}

/** How many contexts there are, are due, and are left out of this scrape. */
function globalFigures(out: Exposition, figures: Figures): void {
  global(out, "coordinator_contexts", "gauge", "Contexts in storage.", figures.contexts);
  global(
    out,
    "coordinator_contexts_due",
    "gauge",
    "Contexts with something due for the supervisor's sweep now.",
    figures.due,
  );
  global(
    out,
    "coordinator_metrics_contexts_omitted",
    "gauge",
    `Contexts this scrape does not report on: it reports on the ${SCRAPE_CONTEXT_LIMIT} with the lowest ids.`,
    figures.omitted,
  );
  global(
    out,
    "coordinator_metrics_taken_timestamp_seconds",
    "gauge",
    "When these figures were read from storage: a scrape within METRICS_CACHE_SECONDS of a reading answers it again.",
    Math.floor(figures.taken / 1000),
  );
}

/** What each context holds now: flows by status, work waiting and in flight, dead letters, runners' loads. */
function contextGauges(out: Exposition, figures: Figures): void {
  const contexts = figures.perContext;
  out.family("coordinator_flows", "gauge", "Flows by status, per context.");
  for (const c of contexts)
    for (const [status, n] of Object.entries(c.flows)) out.sample("coordinator_flows", { context: c.id, status }, n);
  out.family("coordinator_jobs_waiting", "gauge", "Job attempts ready and waiting for a runner, per context.");
  const waiting = contexts.filter((c) => figures.waiting.has(c.id));
  perContext(out, "coordinator_jobs_waiting", waiting, (c) => figures.waiting.get(c.id) ?? 0);
  out.family(
    "coordinator_jobs_in_flight",
    "gauge",
    "Job attempts held by runners (claimed or delivered, not ended), per context.",
  );
  perContext(out, "coordinator_jobs_in_flight", contexts, (c) => c.runners.reduce((n, r) => n + r.inFlight, 0));
  out.family(
    "coordinator_dead_letters",
    "gauge",
    "Dead letters kept: jobs out of retries, undeliverable mail, unreadable reports.",
  );
  perContext(out, "coordinator_dead_letters", contexts, (c) => c.deadLetters);
  out.family("coordinator_runner_in_flight", "gauge", "Job attempts each runner holds, across every isolate.");
  for (const c of contexts)
    for (const r of c.runners) out.sample("coordinator_runner_in_flight", { context: c.id, runner: r.id }, r.inFlight);
}

/** What each context's flows did, folded from the figures their ends pushed: counters and histograms. */
function contextCounters(out: Exposition, contexts: ContextFigures[]): void {
  const counter = (name: string, help: string, value: (c: ContextFigures) => number) => {
    out.family(name, "counter", help);
    perContext(out, name, contexts, value);
  };
  counter(
    "coordinator_dead_letters_dropped_total",
    "Dead letters dropped, oldest first, to keep the context within its cap (DEAD_LETTERS_MAX or its retention).",
    (c) => c.counters[DEAD_LETTERS_DROPPED_FIELD] ?? 0,
  );
  out.family(
    "coordinator_jobs_total",
    "counter",
    "Jobs that ran, by how they ended, counted when their flow ended (stopped: cancelled).",
  );
  for (const c of contexts)
    for (const status of ["finished", "error", "stopped"])
      out.sample("coordinator_jobs_total", { context: c.id, status }, c.counters[status] ?? 0);
  counter(
    "coordinator_job_retries_total",
    "Attempts beyond each job's first, counted when their flow ended.",
    (c) => c.counters["retries"] ?? 0,
  );
  counter(
    "coordinator_deliveries_refused_total",
    "Deliveries a runner refused or did not answer.",
    (c) => c.counters["refused"] ?? 0,
  );
  out.family(
    "coordinator_dispatch_latency_seconds",
    "histogram",
    "From a job's last attempt queued to delivered to its runner, counted when its flow ended.",
  );
  for (const c of contexts)
    out.histogram("coordinator_dispatch_latency_seconds", { context: c.id }, c.counters, "latency", LATENCY_BUCKETS);
  out.family(
    "coordinator_job_duration_seconds",
    "histogram",
    "From a job's last attempt delivered to its end, counted when its flow ended.",
  );
  for (const c of contexts)
    out.histogram("coordinator_job_duration_seconds", { context: c.id }, c.counters, "duration", DURATION_BUCKETS);
}

/** What the supervisor's sweeps did, from the global counters. */
function sweepCounters(out: Exposition, g: Counters): void {
  global(out, "coordinator_sweeps_total", "counter", "Sweeps the supervisor ran (cron).", g["sweeps"] ?? 0);
  global(
    out,
    "coordinator_sweep_contexts_total",
    "counter",
    "Contexts the sweeps found due and handed to their dispatchers.",
    g["swept"] ?? 0,
  );
  global(
    out,
    "coordinator_sweep_contexts_settled_total",
    "counter",
    "Contexts whose dispatcher finished a sweep of them.",
    g["settled"] ?? 0,
  );
  global(
    out,
    "coordinator_sweep_flows_poked_total",
    "counter",
    "Flows (and jobs outside flows) the sweeps found past their check time and poked.",
    g["poked"] ?? 0,
  );
  global(
    out,
    "coordinator_sweep_failures_total",
    "counter",
    "Dispatchers and flows a sweep could not reach.",
    g["sweep_failures"] ?? 0,
  );
}

/** This isolate's own series: its requests and its age. */
function isolateFigures(out: Exposition): void {
  out.family(
    "coordinator_isolate_http_requests_total",
    "counter",
    "Requests answered by this isolate (not the whole coordinator), by route and status.",
  );
  for (const [k, v] of requests) out.lines.push(`${k} ${v}`);
  global(
    out,
    "coordinator_isolate_uptime_seconds",
    "gauge",
    "Seconds since this isolate (not the whole coordinator) served its first request.",
    Math.floor((Date.now() - (started ?? Date.now())) / 1000),
  );
}

/**
 * /metrics tells every tenant's figures, and a fresh reading costs Redis commands per context: only a scraper
 * with METRICS_TOKEN reads it, or anyone where ALLOW_INSECURE_HTTP is on (local development).
 */
export function checkScraper(config: Config, authorization: string | undefined): void {
  const token = config.metricsToken;
  if (token === undefined) {
    if (config.allowInsecureHttp) return;
    throw new Problem("forbidden", "/metrics is off: set the METRICS_TOKEN secret and send it as a bearer token");
  }
  const sent = /^Bearer (.+)$/.exec(authorization ?? "")?.[1] ?? "";
  if (!sameText(sent, token))
    throw new Problem("forbidden", "/metrics needs `Authorization: Bearer <METRICS_TOKEN>`", { needed: ["metrics"] });
}

/** Compares in time independent of where the texts differ. */
function sameText(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}
