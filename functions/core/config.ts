import { z } from "zod";
import { RETRY_DEFAULTS } from "../../shared/flow/index.js";
import { PublicKey } from "../../shared/model/index.js";
import { DEAD_LETTERS_MAX } from "../../shared/store/index.js";
import { Problem } from "./problem.js";
import type { Env } from "./env.js";

const keyList = z
  .string()
  .default("")
  .transform((text) =>
    text
      .split(",")
      .map((k) => k.trim())
      .filter(Boolean),
  )
  .pipe(z.array(PublicKey));

const seconds = (fallback: number) => z.coerce.number().int().min(0).default(fallback);
const DAY = 86_400;
/** A retention window: at least a second, at most ten years (as a context's own setting). */
const window = (fallback: number) => z.coerce.number().int().min(1).max(315_360_000).default(fallback);

/**
 * How long the coordinator waits for a push runner to answer a POST of deliveries (ms), by
 * default. Bounded below the 30 s after which a claim left unsettled is reaped (its owner asked
 * to deliver again): a POST still waiting then could be sent a second time beside itself.
 */
export const DELIVERY_TIMEOUT_DEFAULT_MS = 10_000;
const DELIVERY_TIMEOUT_MIN_MS = 1_000;
const DELIVERY_TIMEOUT_MAX_MS = 20_000;

/** The longest a scrape of /metrics may answer from figures read by an earlier one (seconds). */
const METRICS_CACHE_MAX_SECONDS = 3_600;

const ConfigSchema = z.object({
  SIGNATURE_SKEW_SECONDS: seconds(300),
  ACTOR_REGISTRATION: z.enum(["open", "allowlist", "operator"]).default("open"),
  ACTOR_ALLOWLIST: keyList,
  OPERATOR_PUBKEYS: keyList,
  ALLOW_INSECURE_HTTP: z.enum(["true", "false", ""]).default("false"),
  KEY_CACHE_SECONDS: seconds(300),
  RETRY_BASE_MS: z.coerce.number().int().min(0).default(RETRY_DEFAULTS.baseMs),
  RETRY_CAP_MS: z.coerce.number().int().min(0).default(RETRY_DEFAULTS.capMs),
  METRICS_TOKEN: z.string().min(16, "at least 16 characters").optional(),
  METRICS_CACHE_SECONDS: z.coerce.number().int().min(0).max(METRICS_CACHE_MAX_SECONDS).default(60),
  // The bounds of a context's own `retention.dead_letters`.
  DEAD_LETTERS_MAX: z.coerce.number().int().min(1).max(1_000_000).default(DEAD_LETTERS_MAX),
  DELIVERY_TIMEOUT_MS: z.coerce
    .number()
    .int()
    .min(DELIVERY_TIMEOUT_MIN_MS)
    .max(DELIVERY_TIMEOUT_MAX_MS)
    .default(DELIVERY_TIMEOUT_DEFAULT_MS),
  RETENTION_FINISHED_SECONDS: window(7 * DAY),
  RETENTION_ERROR_SECONDS: window(30 * DAY),
  RETENTION_INBOX_SECONDS: window(30 * DAY),
});

/** The Worker's settings, parsed from its vars once per set of bindings. */
export interface Config {
  skewSeconds: number;
  registration: "open" | "allowlist" | "operator";
  allowlist: ReadonlySet<string>;
  operatorKeys: ReadonlySet<string>;
  allowInsecureHttp: boolean;
  keyCacheSeconds: number;
  /** Retry backoff of jobs: base and cap of the exponential, milliseconds (full jitter). */
  retryBaseMs: number;
  retryCapMs: number;
  /** What a scraper of /metrics must send as its bearer token (unset: local development only). */
  metricsToken: string | undefined;
  /** How old the figures a scrape of /metrics answers may be, in seconds (0: read afresh each time). */
  metricsCacheSeconds: number;
  /** Most dead letters a context keeps unless its `retention.dead_letters` says otherwise. */
  deadLettersMax: number;
  /** How long a push runner has to answer a POST of deliveries (ms). */
  deliveryTimeoutMs: number;
  /** Retention defaults (seconds), which a context's own `retention` overrides part by part. */
  retention: { finished_seconds: number; error_seconds: number; inbox_seconds: number };
}

const cache = new WeakMap<Env, Config>();

/** Reads the vars; a bad value is a 500 naming the variable, never a silently different default. */
export function readConfig(env: Env): Config {
  const cached = cache.get(env);
  if (cached) return cached;
  const blankToUndefined = (v: string | undefined) => (v === "" ? undefined : v);
  const parsed = ConfigSchema.safeParse({
    SIGNATURE_SKEW_SECONDS: blankToUndefined(env.SIGNATURE_SKEW_SECONDS),
    ACTOR_REGISTRATION: blankToUndefined(env.ACTOR_REGISTRATION),
    ACTOR_ALLOWLIST: env.ACTOR_ALLOWLIST,
    OPERATOR_PUBKEYS: env.OPERATOR_PUBKEYS,
    ALLOW_INSECURE_HTTP: env.ALLOW_INSECURE_HTTP,
    KEY_CACHE_SECONDS: blankToUndefined(env.KEY_CACHE_SECONDS),
    RETRY_BASE_MS: blankToUndefined(env.RETRY_BASE_MS),
    RETRY_CAP_MS: blankToUndefined(env.RETRY_CAP_MS),
    METRICS_TOKEN: blankToUndefined(env.METRICS_TOKEN),
    METRICS_CACHE_SECONDS: blankToUndefined(env.METRICS_CACHE_SECONDS),
    DEAD_LETTERS_MAX: blankToUndefined(env.DEAD_LETTERS_MAX),
    DELIVERY_TIMEOUT_MS: blankToUndefined(env.DELIVERY_TIMEOUT_MS),
    RETENTION_FINISHED_SECONDS: blankToUndefined(env.RETENTION_FINISHED_SECONDS),
    RETENTION_ERROR_SECONDS: blankToUndefined(env.RETENTION_ERROR_SECONDS),
    RETENTION_INBOX_SECONDS: blankToUndefined(env.RETENTION_INBOX_SECONDS),
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Problem("misconfigured", `${String(issue?.path[0])}: ${issue?.message}`);
  }
  const v = parsed.data;
  const config: Config = {
    skewSeconds: v.SIGNATURE_SKEW_SECONDS,
    registration: v.ACTOR_REGISTRATION,
    allowlist: new Set(v.ACTOR_ALLOWLIST),
    operatorKeys: new Set(v.OPERATOR_PUBKEYS),
    allowInsecureHttp: v.ALLOW_INSECURE_HTTP === "true",
    keyCacheSeconds: v.KEY_CACHE_SECONDS,
    retryBaseMs: v.RETRY_BASE_MS,
    retryCapMs: v.RETRY_CAP_MS,
    metricsToken: v.METRICS_TOKEN,
    metricsCacheSeconds: v.METRICS_CACHE_SECONDS,
    deadLettersMax: v.DEAD_LETTERS_MAX,
    deliveryTimeoutMs: v.DELIVERY_TIMEOUT_MS,
    retention: {
      finished_seconds: v.RETENTION_FINISHED_SECONDS,
      error_seconds: v.RETENTION_ERROR_SECONDS,
      inbox_seconds: v.RETENTION_INBOX_SECONDS,
    },
  };
  cache.set(env, config);
  return config;
}

/**
 * DEAD_LETTERS_MAX alone, for the Store every Durable Object opens (they read no other var, so a
 * mistake elsewhere in the vars does not stop them); a bad value is a 500 naming it.
 */
export function readDeadLettersMax(env: Env): number {
  const parsed = ConfigSchema.shape.DEAD_LETTERS_MAX.safeParse(env.DEAD_LETTERS_MAX || undefined);
  if (!parsed.success) throw new Problem("misconfigured", `DEAD_LETTERS_MAX: ${parsed.error.issues[0]?.message}`);
  return parsed.data;
}

const deliveryTimeouts = new WeakMap<Env, number>();

/**
 * DELIVERY_TIMEOUT_MS alone, for the FlowCoordinator that POSTs deliveries (read once per set of
 * bindings); a bad value is a 500 naming it.
 */
export function readDeliveryTimeoutMs(env: Env): number {
  const cached = deliveryTimeouts.get(env);
  if (cached !== undefined) return cached;
  const parsed = ConfigSchema.shape.DELIVERY_TIMEOUT_MS.safeParse(env.DELIVERY_TIMEOUT_MS || undefined);
  if (!parsed.success) throw new Problem("misconfigured", `DELIVERY_TIMEOUT_MS: ${parsed.error.issues[0]?.message}`);
  deliveryTimeouts.set(env, parsed.data);
  return parsed.data;
}

/**
 * The coordinator's public origin as configured (PUBLIC_URL without trailing slashes), for the
 * callback URLs runners get; "" when unset, where a request's own origin stands in.
 */
export function publicOrigin(env: Env): string {
  return env.PUBLIC_URL?.replace(/\/+$/, "") ?? "";
}
