import type { ContextFeedRpc, DispatcherRpc, FlowCoordinatorRpc, SchedulerRpc } from "./contracts.js";

/**
 * The Worker's bindings (wrangler.toml `[vars]`, secrets, Durable Objects). Every one is listed
 * with its meaning in the configuration table of docs/operations.md.
 */
export interface Env {
  /** The FlowCoordinator Durable Objects: one per flow, named `<prefix><context>:flow:<id>`. */
  FLOW_COORDINATOR: DurableObjectNamespace<FlowCoordinatorRpc>;
  /** The Dispatcher Durable Objects: one per context, named `<prefix><context>:dispatch`. */
  DISPATCHER: DurableObjectNamespace<DispatcherRpc>;
  /** The ContextFeed Durable Objects (a context's event stream): one per context, `<prefix><context>:feed`. */
  CONTEXT_FEED: DurableObjectNamespace<ContextFeedRpc>;
  /** The Scheduler Durable Objects (recurring flows): one per schedule, `<prefix><context>:schedule:<id>`. */
  SCHEDULER: DurableObjectNamespace<SchedulerRpc>;
  /** Upstash (or local REST endpoint) URL. Secret. */
  UPSTASH_REDIS_REST_URL: string;
  /** Bearer token for that endpoint. Secret. */
  UPSTASH_REDIS_REST_TOKEN: string;
  /** Prefix in front of every Redis key, to share one database between deployments. */
  KEY_PREFIX?: string;
  /** Deadline for one storage request, in milliseconds (default 5000). */
  REDIS_TIMEOUT_MS?: string;
  /**
   * `true` when that endpoint fronts a Redis Cluster (the REST endpoint's REDIS_CLUSTER): no
   * script or command names keys of two slots (docs/deploy.md, "Redis Cluster").
   */
  STORAGE_CLUSTER?: string;
  /** The coordinator's Ed25519 private key as a JWK (JSON). Secret. */
  COORDINATOR_SIGNING_KEY?: string;
  /** The key that will replace it, published ahead of a rotation. Secret, optional. */
  COORDINATOR_SIGNING_KEY_NEXT?: string;
  /** How far a signature's `created` may be from now, in seconds (default 300). */
  SIGNATURE_SKEW_SECONDS?: string;
  /** Who may register actors: `open` (default), `allowlist` or `operator`. */
  ACTOR_REGISTRATION?: string;
  /** Public keys allowed to register themselves when ACTOR_REGISTRATION=allowlist (comma-separated). */
  ACTOR_ALLOWLIST?: string;
  /** Operator public keys whose countersignature registers actors when ACTOR_REGISTRATION=operator. */
  OPERATOR_PUBKEYS?: string;
  /** `true` accepts plain http:// addresses for runners and actors. Local development only. */
  ALLOW_INSECURE_HTTP?: string;
  /** Retry backoff of jobs: base of the exponential in ms (default 1000). */
  RETRY_BASE_MS?: string;
  /** Retry backoff of jobs: its cap in ms (default 60000). */
  RETRY_CAP_MS?: string;
  /** How long a push runner has to answer a POST of deliveries, in ms (default 10000, 1000 to 20000). */
  DELIVERY_TIMEOUT_MS?: string;
  /** Most dead letters a context keeps (default 10000; past it the oldest go); a context's `retention` overrides it. */
  DEAD_LETTERS_MAX?: string;
  /** Retention defaults, seconds: ended flows (finished, error) and unread inbox messages. */
  RETENTION_FINISHED_SECONDS?: string;
  RETENTION_ERROR_SECONDS?: string;
  RETENTION_INBOX_SECONDS?: string;
  /** The coordinator's public origin for runner callbacks (default: the origin requests arrive at). */
  PUBLIC_URL?: string;
  /**
   * How long an isolate may reuse a looked-up public key, in seconds (default 300; 0 = never). A
   * removed or rotated key stops working within a second regardless (the key epoch).
   */
  KEY_CACHE_SECONDS?: string;
  /**
   * The bearer token a scraper sends to read /metrics (a secret). Unset, /metrics answers only
   * where ALLOW_INSECURE_HTTP is on (local development).
   */
  METRICS_TOKEN?: string;
  /**
   * How old, in seconds, the figures a scrape of /metrics answers may be (default 60; 0 = read
   * afresh each time): within it a scrape answers from the last reading kept in storage.
   */
  METRICS_CACHE_SECONDS?: string;
}
