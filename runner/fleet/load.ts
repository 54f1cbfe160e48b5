import type { FleetNames } from "./names.js";
import type { FleetStores } from "./setup.js";

/** The fleet's capacity and the work stream's depth are read again after this long (ms). */
const READ_EVERY_MS = 500;

/**
 * The fleet's capacity and the jobs in it, as the gateway counts them: the live workers' slots
 * (or the `--capacity` cap) and the job messages waiting or out with a worker (as the workers'
 * consumer counts them), as last read, plus what changed since — jobs reserved (counted before
 * their publish, so deliveries at once cannot all pass the check) and results relayed. A job
 * leaves the fleet when its worker acknowledges it, just after its result is stored, while the
 * coordinator may already push the next job on the slot that result freed: counting the relayed
 * result as gone keeps that push from a false 429. A read keeps what changed while it ran.
 */
export class FleetLoad {
  private read = { at: 0, capacity: 0, depth: 0, running: 0 };
  private reserved = 0;
  private settled = 0;
  private reading: Promise<void> | undefined;

  constructor(
    private readonly stores: FleetStores,
    private readonly names: FleetNames,
    private readonly capacityCap: number | undefined,
  ) {}

  /** Jobs the fleet can hold, as last read. */
  get capacity(): number {
    return this.read.capacity;
  }

  /** Job messages in the fleet (waiting or running), with what changed since the last read. */
  get depth(): number {
    return Math.max(0, this.read.depth + this.reserved - this.settled);
  }

  /** Job messages out with a worker, as last read. */
  get running(): number {
    return this.read.running;
  }

  /** Room for more jobs (pull: how many to lease). */
  get room(): number {
    return Math.max(0, this.read.capacity - this.depth);
  }

  /** A place taken before a publish (`by` 1), or given back (-1: it failed, or was a duplicate). */
  reserve(by: 1 | -1): void {
    this.reserved += by;
  }

  /** A result on its way to the coordinator (1), or back unanswered (-1): its job is leaving. */
  settle(by: 1 | -1): void {
    this.settled += by;
  }

  /** Reads again if the last read is older than half a second. */
  async fresh(): Promise<void> {
    if (Date.now() - this.read.at > READ_EVERY_MS) await this.refresh();
  }

  /** Reads the live workers' slots and the consumer's counts (one read at a time). */
  refresh(): Promise<void> {
    return (this.reading ??= this.readNow().finally(() => (this.reading = undefined)));
  }

  private async readNow(): Promise<void> {
    const before = { reserved: this.reserved, settled: this.settled };
    let slots = 0;
    for await (const key of await this.stores.workers.keys()) {
      const entry = await this.stores.workers.get(key);
      if (!entry || entry.operation !== "PUT") continue;
      const worker = entry.json<{ slots?: number; draining?: boolean }>();
      if (!worker.draining) slots += worker.slots ?? 0;
    }
    const info = await this.stores.jsm.consumers.info(this.names.jobsStream, this.names.workersConsumer);
    this.read = {
      at: Date.now(),
      capacity: this.capacityCap === undefined ? slots : Math.min(slots, this.capacityCap),
      depth: info.num_pending + info.num_ack_pending,
      running: info.num_ack_pending,
    };
    this.reserved -= before.reserved;
    this.settled -= before.settled;
  }
}
