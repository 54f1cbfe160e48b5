import { LuaScript } from "../script.js";
import { KEEP_DEAD_LETTER } from "./dead-letter-cap.js";

/**
 * addDeadLetter: keep one dead letter (entries from flows are written by commitFlow itself),
 * within the context's cap: past it the oldest are dropped and counted (scripts/dead-letter-cap.ts).
 *   KEYS[1]  the dead letters hash   KEYS[2]  their index
 *   KEYS[3]  the context hash (its `retention` may set the cap)   KEYS[4]  the context's counters
 *   ARGV[1]  id   ARGV[2]  the entry (JSON)   ARGV[3]  score (epoch ms)
 *   ARGV[4]  the deployment's cap (DEAD_LETTERS_MAX)
 * Returns 1 added, 0 already there (a replay: nothing written, nothing dropped).
 */
export const addDeadLetter = new LuaScript(
  "addDeadLetter",
  `${KEEP_DEAD_LETTER}
return keepDeadLetter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4])`,
);

/**
 * deleteDeadLetter: remove one dead letter and its index entry. Idempotent.
 *   KEYS[1]  the dead letters hash   KEYS[2]  their index
 *   ARGV[1]  id
 * Returns 1 deleted, 0 already gone.
 */
export const deleteDeadLetter = new LuaScript(
  "deleteDeadLetter",
  `redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("HDEL", KEYS[1], ARGV[1])`,
);
