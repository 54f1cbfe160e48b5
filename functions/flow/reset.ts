/**
 * Wipes a FlowCoordinator's storage: its alarm, every key (scope, incarnation, journal, pending
 * plan, owed wake, outage mark, nonces, feed cursor) and its SQL tables (the event stream). In a
 * SQLite-backed object `deleteAll` drops the tables with the keys, but never the alarm, which is
 * deleted first so it cannot ring on storage that is half gone.
 *
 * Storage only: the object's memory (its parts' caches, the state) is for the caller to forget.
 * Used when the object finds its storage belongs to another incarnation of its flow (Redis was
 * flushed, or the flow deleted and its id reused), and when the flow is purged.
 */
export async function wipeStorage(ctx: DurableObjectState): Promise<void> {
  await ctx.storage.deleteAlarm();
  await ctx.storage.deleteAll();
}
