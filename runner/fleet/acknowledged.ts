import type { RunnerLog } from "../job.js";
import type { FleetMetrics } from "./metrics.js";
import type { FleetNames } from "./names.js";
import type { FleetStores } from "./setup.js";

/** The gateway looks for acknowledged job messages left in the work stream this often (ms). */
export const SWEEP_ACKNOWLEDGED_MS = 10_000;

const REMOVED_HELP =
  "Acknowledged job messages the gateway removed from the work stream (kept by NATS below the workers' ack floor).";

/**
 * Removes job messages the workers' consumer has acknowledged but the work stream still holds.
 *
 * A work-queue stream drops a message when its ack arrives; after a NATS restart mid-ack (or a
 * worker killed while its ack was on the way) the consumer's state may say the message is
 * acknowledged — its ack floor passed it — while the stream kept it. Nothing would ever take it
 * again, yet it counts among the stream's messages (the fleet's depth on `/info`, backups,
 * limits). Every message at or below the ack floor is acknowledged by definition (terminated dead
 * letters included; the consumer never gives one up, `max_deliver` -1), so purging the stream up
 * to the floor removes only those: one purge, no scan, whatever the stream's length.
 * Returns how many were removed.
 */
export async function removeAcknowledged(
  stores: FleetStores,
  names: FleetNames,
  metrics: FleetMetrics,
  log: RunnerLog,
): Promise<number> {
  const consumer = await stores.jsm.consumers.info(names.jobsStream, names.workersConsumer);
  const floor = consumer.ack_floor.stream_seq;
  const stream = await stores.jsm.streams.info(names.jobsStream);
  if (stream.state.messages === 0 || stream.state.first_seq > floor) return 0;
  const { purged } = await stores.jsm.streams.purge(names.jobsStream, { seq: floor + 1 });
  metrics.count("fleet_acknowledged_removed_total", REMOVED_HELP, {}, purged);
  if (purged > 0)
    log.warn(`removed ${purged} acknowledged job message(s) NATS kept in ${names.jobsStream} (up to #${floor})`);
  return purged;
}

/** Declares the counter at 0, so a scrape shows it before anything was removed. */
export function declareAcknowledgedRemoved(metrics: FleetMetrics): void {
  metrics.count("fleet_acknowledged_removed_total", REMOVED_HELP, {}, 0);
}
