/**
 * Named errors of the storage layer. The API maps each to a problem+json status; nothing here
 * knows about HTTP.
 */

/** Base class: every error the store raises on purpose. */
export class StoreError extends Error {
  override name = "StoreError";
}

/** The object does not exist (404). */
export class NotFoundError extends StoreError {
  override name = "NotFoundError";
  constructor(
    readonly kind: string,
    readonly ref: string,
  ) {
    super(`${kind} ${ref} does not exist`);
  }
}

/** The id is already taken (409). */
export class ConflictError extends StoreError {
  override name = "ConflictError";
  constructor(
    readonly kind: string,
    readonly ref: string,
    detail?: string,
  ) {
    super(detail ?? `${kind} ${ref} already exists`);
  }
}

/** One field of a stored hash that does not match its schema. */
export interface FieldIssue {
  field: string;
  message: string;
}

/**
 * A stored hash does not parse as its model: written by something else, or damaged. Reported
 * with the key and the fields at fault instead of being handed out half-right.
 */
export class CorruptRecordError extends StoreError {
  override name = "CorruptRecordError";
  constructor(
    readonly key: string,
    readonly issues: FieldIssue[],
  ) {
    super(`stored record ${key} is corrupt: ${issues.map((i) => `${i.field}: ${i.message}`).join("; ")}`);
  }
}

/** Redis (or the REST endpoint in front of it) cannot be reached right now (503). */
export class StorageUnavailableError extends StoreError {
  override name = "StorageUnavailableError";
}

/** Redis refused a command: a bug in the coordinator, never a client's mistake (500). */
export class RedisCommandError extends StoreError {
  override name = "RedisCommandError";
}

/**
 * A Redis Cluster refused a command or script naming keys of two slots (`CROSSSLOT`): nothing of
 * it ran. Either the deployment stores on a cluster and was not told so (`Keys.cluster`: the
 * Worker's STORAGE_CLUSTER), which the Worker answers 503 naming the setting, or, told so, a bug
 * in the key layout (500). A RedisCommandError still: running the same call again cannot help.
 */
export class CrossSlotError extends RedisCommandError {
  override name = "CrossSlotError";
}
