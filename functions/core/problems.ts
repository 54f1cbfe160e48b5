/**
 * Every kind of problem the coordinator answers with: its `type` (`/problems/<name>`), its HTTP
 * status, its title, and what it means. The one list: `Problem` takes its status and title from
 * here, the OpenAPI document publishes it, and docs/api.md's table is checked against it.
 */
export const PROBLEMS = {
  "invalid-input": {
    status: 400,
    title: "Invalid input",
    meaning:
      'A part of the request is invalid: `field` names the first one at fault, `errors` all of them. An unknown field names the field of a flow file it most likely meant (`Unrecognized key: "scirpt" (did you mean "script"?)`), a missing one says `missing required field`, and a number whose name does not carry its unit says it (`timeout is in seconds`).',
  },
  "bad-request": {
    status: 400,
    title: "Bad request",
    meaning: "The request could not be read (a body that is not JSON, a truncated body).",
  },
  "signature-missing": {
    status: 401,
    title: "Unauthorized",
    meaning: "The request is not signed, or not with the label and components required (see `Accept-Signature`).",
  },
  "signature-malformed": {
    status: 401,
    title: "Unauthorized",
    meaning: "The `Signature` or `Signature-Input` header cannot be parsed.",
  },
  "signature-invalid": {
    status: 401,
    title: "Unauthorized",
    meaning: "The signature does not verify with the key its `keyid` names.",
  },
  "digest-mismatch": {
    status: 401,
    title: "Unauthorized",
    meaning: "The body does not match its `Content-Digest`, or the digest is missing.",
  },
  "signature-expired": {
    status: 401,
    title: "Unauthorized",
    meaning:
      "The signature's `created` is older than the allowed skew, or than the coordinator's storage (made again after a reset).",
  },
  "signature-from-future": {
    status: 401,
    title: "Unauthorized",
    meaning: "The signature's `created` is later than the allowed skew.",
  },
  "nonce-replayed": {
    status: 401,
    title: "Unauthorized",
    meaning: "The signature's nonce was used before: sign every request with a new one.",
  },
  "unknown-key": {
    status: 401,
    title: "Unauthorized",
    meaning:
      "No actor or runner is registered with the key `keyid` names (or a bare key was used where an actor must sign).",
  },
  "ticket-invalid": {
    status: 401,
    title: "Unauthorized",
    meaning: "The WebSocket ticket is unknown, already used, or expired: ask `POST /v1/tickets` for a new one.",
  },
  forbidden: {
    status: 403,
    title: "Forbidden",
    meaning:
      "The signer may not do this: `needed` names the permission lists (or the kind of signer) that would allow it.",
  },
  "not-your-job": {
    status: 403,
    title: "Forbidden",
    meaning: "A runner reported on an attempt that was given to another runner.",
  },
  "countersignature-required": {
    status: 403,
    title: "Forbidden",
    meaning: "The operation needs a second signature (an operator's, or the new key's) that is missing or invalid.",
  },
  "not-found": { status: 404, title: "Not found", meaning: "No such object in the context the path names." },
  "no-route": { status: 404, title: "Not found", meaning: "No route has this method and path." },
  conflict: {
    status: 409,
    title: "Conflict",
    meaning:
      "The id is taken, the object is in a state that does not allow this, or the change would leave a context without an admin.",
  },
  "stale-attempt": {
    status: 409,
    title: "Conflict",
    meaning:
      "A report on an attempt that is no longer current (it timed out, was retried or cancelled): stop working on it.",
  },
  "request-too-large": {
    status: 413,
    title: "Content too large",
    meaning:
      "The body is larger than the route takes (1 MiB on every route): `field` names it and `limit` gives the most, in bytes. Every size limit: docs/limits.md.",
  },
  "unsupported-media-type": {
    status: 415,
    title: "Unsupported media type",
    meaning: "The body must be JSON, sent with `content-type: application/json`.",
  },
  "idempotency-key-reused": {
    status: 422,
    title: "Idempotency-Key reused",
    meaning: "This Idempotency-Key was used for another request; use a new key for a new request.",
  },
  "flow-starts-throttled": {
    status: 429,
    title: "Too many flow starts",
    meaning:
      "The context's `flow_starts_per_minute` is used up: nothing was created or started; try again after `Retry-After` seconds (`retry_after_ms` in the body).",
  },
  "headers-too-large": {
    status: 431,
    title: "Request header fields too large",
    meaning: "A header is larger than 8 KiB, or all of them together larger than 16 KiB.",
  },
  internal: {
    status: 500,
    title: "Internal error",
    meaning: "The coordinator failed unexpectedly; the details are in its logs.",
  },
  "corrupt-record": {
    status: 500,
    title: "A stored record is corrupt",
    meaning: "A record in storage does not match its schema: `key` and `fields` say where.",
  },
  misconfigured: {
    status: 500,
    title: "The coordinator is misconfigured",
    meaning: "A setting of the deployment is invalid; the detail names it.",
  },
  "storage-unavailable": {
    status: 503,
    title: "Storage unavailable",
    meaning: "Storage did not answer within its deadline or could not be reached; retry (see `Retry-After`).",
  },
  "storage-not-configured": {
    status: 503,
    title: "Storage is not configured",
    meaning: "The deployment has no UPSTASH_REDIS_REST_URL / UPSTASH_REDIS_REST_TOKEN.",
  },
  "storage-cluster-undeclared": {
    status: 503,
    title: "Storage is a Redis Cluster the coordinator was not told of",
    meaning:
      'The REST endpoint fronts a Redis Cluster, which refused keys of two hash slots (CROSSSLOT), and the deployment lacks the var `STORAGE_CLUSTER = "true"` (`setting` names it). Nothing of the refused call was stored; it succeeds once the var is set.',
  },
  "signing-key-missing": {
    status: 503,
    title: "The coordinator has no signing key",
    meaning: "The deployment has no COORDINATOR_SIGNING_KEY to sign deliveries with.",
  },
} as const satisfies Record<string, { status: number; title: string; meaning: string }>;

/** The name of a kind of problem: its `type` is `/problems/<name>`. */
export type ProblemType = keyof typeof PROBLEMS;

/** The catalog as a Markdown table (type, status, meaning): the OpenAPI document and docs/api.md show it. */
export function problemTable(): string {
  const rows = Object.entries(PROBLEMS).map(
    ([kind, p]) => `| \`${problemUri(kind as ProblemType)}\` | ${p.status} | ${p.meaning} |`,
  );
  return ["| type | status | meaning |", "|---|---|---|", ...rows].join("\n");
}

/** The `type` URI of a kind of problem. */
export function problemUri(type: ProblemType): string {
  return `/problems/${type}`;
}
