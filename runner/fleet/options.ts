import type { FleetSetup } from "./setup.js";

/** A runner process's part in a fleet on NATS JetStream. */
export interface FleetOptions {
  /** `gateway`: the registered runner, storing deliveries; `worker`: runs them; `combined`: both. */
  mode: "gateway" | "worker" | "combined";
  /** NATS server URLs, e.g. `nats://127.0.0.1:4222`. */
  servers: string[];
  setup?: Partial<FleetSetup>;
  /** Gateway: at most this many jobs in the fleet at once, whatever its workers offer. */
  capacity?: number;
  /** Where `/health`, `/ready`, `/metrics`, `/info` and `/admin/drain` are served when no push server is (port 0: any free one). */
  opsListen?: { host: string; port: number };
  /** A drain ends within this long in every mode; then running jobs are stopped (ms, default 10 minutes). */
  drainTimeoutMs?: number;
}
