/**
 * What a request body may ask of Redis. Commands that would change a pooled connection's state
 * (SELECT, a stray MULTI), hold it in a mode no JSON answer can express (SUBSCRIBE, MONITOR) or
 * touch the server itself are refused with an Upstash-style error instead of being forwarded.
 */

/** A request body that is not a command (or list of commands) Redis may run. */
export class CommandError extends Error {
  override name = "CommandError";
}

export type Command = string[];

const REFUSED = new Set([
  "SUBSCRIBE",
  "PSUBSCRIBE",
  "SSUBSCRIBE",
  "UNSUBSCRIBE",
  "PUNSUBSCRIBE",
  "SUNSUBSCRIBE",
  "MONITOR",
  "SYNC",
  "PSYNC",
  "REPLCONF",
  "SELECT",
  "SWAPDB",
  "MOVE",
  "HELLO",
  "RESET",
  "QUIT",
  "AUTH",
  "CLIENT",
  "MULTI",
  "EXEC",
  "DISCARD",
  "WATCH",
  "UNWATCH",
  "SHUTDOWN",
  "DEBUG",
  "REPLICAOF",
  "SLAVEOF",
  "FAILOVER",
  "MIGRATE",
  "ACL",
  "CONFIG",
  "SAVE",
  "BGSAVE",
  "BGREWRITEAOF",
  "MODULE",
]);

/** Validates one command: a non-empty array of strings, numbers or booleans. */
export function toCommand(value: unknown): Command {
  if (!Array.isArray(value) || value.length === 0) {
    throw new CommandError("ERR a command must be a non-empty JSON array");
  }
  const args = value.map((arg) => {
    if (typeof arg === "string") return arg;
    if (typeof arg === "number" || typeof arg === "boolean") return String(arg);
    throw new CommandError("ERR command arguments must be strings, numbers or booleans");
  });
  const name = (args[0] as string).toUpperCase();
  if (REFUSED.has(name)) throw new CommandError(`ERR Command is not allowed: ${name}`);
  return args;
}

/** Validates a `/pipeline` or `/multi-exec` body: a non-empty array of commands. */
export function toCommandList(value: unknown): Command[] {
  if (!Array.isArray(value) || value.length === 0) {
    throw new CommandError("ERR a pipeline must be a non-empty JSON array of commands");
  }
  return value.map(toCommand);
}
