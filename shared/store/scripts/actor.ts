import { LuaScript } from "../script.js";

/**
 * releaseKey: drop a public key's claim, but only if it still points at this actor.
 *   KEYS[1]  actor_key:<pubkey>     ARGV[1]  actor id
 * Returns 1 released, 0 it belonged to someone else (or no one).
 */
export const releaseKey = new LuaScript(
  "releaseKey",
  `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end
return 0`,
);
