/** The runner fleet on NATS JetStream: gateways and workers behind one registered runner. */
export { startFleetRunner } from "./fleet.js";
export type { FleetOptions } from "./options.js";
export { fleetNames, attemptId } from "./names.js";
export type { FleetNames, AttemptRef } from "./names.js";
export { DEFAULT_FLEET_SETUP, ensureFleet } from "./setup.js";
export type { FleetSetup } from "./setup.js";
