import { FlowProducer, Queue, Worker } from "bullmq";
import { Redis } from "ioredis";
import type { LoneTimings, ShapeCost } from "./ours.js";
import { CONCURRENCY } from "./ours.js";
import { cpuBetween, cpuSample, executedBetween, now, nthTime, sleep, type RedisCounter } from "./measure.js";
import { bullChain, bullTree } from "./shapes.js";

// BullMQ's side, in this process, on the same redis-server as the coordinator: a Queue and a
// FlowProducer to submit, a Worker of concurrency 50 whose processor returns at once. A job
// "starts" when the processor is called and its result is "applied" when the Worker emits
// `completed` (moveToFinished has returned). BullMQ is used as shipped: default job and worker
// options (completed jobs kept, stalled check every 30 s, drainDelay 5 s).

/** Where BullMQ's keys go: its own prefix, so nothing collides with the coordinator's keys. */
const PREFIX = "bench-bull";
const QUEUE = "shapes";
const IDLE_QUEUE = "idle";

/**
 * Commands ioredis writes to redis-server, counted where every command goes through, pipelines
 * and MULTI included: Redis.prototype.sendCommand. One EVALSHA counts 1, as the REST endpoint
 * counts for the coordinator. Only BullMQ uses ioredis in this process.
 */
export const ioredisSent = { commands: 0 };
{
  const proto = Redis.prototype as unknown as { sendCommand: (...args: unknown[]) => unknown };
  const original = proto.sendCommand;
  proto.sendCommand = function (this: Redis, ...args: unknown[]) {
    ioredisSent.commands++;
    return original.apply(this, args);
  };
}

/** Completions by tag (a shape run's jobs all carry one), and waiters for them. */
class Completions {
  private readonly done = new Map<string, number[]>();
  private readonly started = new Map<string, number>();
  private readonly watchers = new Set<() => void>();

  began(tag: string): void {
    if (!this.started.has(tag)) this.started.set(tag, now());
  }

  completed(tag: string): void {
    this.done.set(tag, [...(this.done.get(tag) ?? []), now()]);
    this.watchers.forEach((w) => w());
  }

  /** When the first job of `tag` began. */
  startOf(tag: string): number | undefined {
    return this.started.get(tag);
  }

  /** When the `n`-th job of `tag` completed, once it has. */
  nth(tag: string, n: number, timeoutMs: number): Promise<number> {
    return nthTime(
      this.watchers,
      () => this.done.get(tag) ?? [],
      n,
      timeoutMs,
      (count) => `BullMQ ${tag}: ${count} of ${n} completed in ${timeoutMs} ms`,
    );
  }
}

/** BullMQ on `redisUrl`: the worker runs only while BullMQ is being measured, so it is silent otherwise. */
export class BullSystem {
  private readonly connections: Redis[] = [];
  private readonly queue: Queue;
  private readonly flows: FlowProducer;
  private worker: Worker | undefined;
  private readonly completions = new Completions();
  private serial = 0;

  constructor(
    private readonly redisUrl: string,
    private readonly counter: RedisCounter,
  ) {
    this.queue = new Queue(QUEUE, { connection: this.connect(), prefix: PREFIX });
    this.flows = new FlowProducer({ connection: this.connect(), prefix: PREFIX });
  }

  /** A connection of BullMQ's (Workers need maxRetriesPerRequest: null). */
  private connect(): Redis {
    const connection = new Redis(this.redisUrl, { maxRetriesPerRequest: null });
    this.connections.push(connection);
    return connection;
  }

  private tag(shape: string): string {
    return `${shape}-${++this.serial}`;
  }

  /** Starts the worker on `queue`; BullMQ's commands from now on are its. */
  async openWorker(queue = QUEUE): Promise<void> {
    const worker = new Worker(
      queue,
      async (job) => {
        this.completions.began((job.data as { tag: string }).tag);
        return null;
      },
      { connection: this.connect(), prefix: PREFIX, concurrency: CONCURRENCY },
    );
    worker.on("completed", (job) => this.completions.completed((job.data as { tag: string }).tag));
    worker.on("error", (error) => console.error(`BullMQ worker: ${error.message}`));
    await worker.waitUntilReady();
    this.worker = worker;
  }

  /** Closes the worker: while the coordinator is measured, BullMQ sends nothing. */
  async closeWorker(): Promise<void> {
    await this.worker?.close();
    this.worker = undefined;
  }

  /** Runs a few shapes first, as the coordinator's side does. */
  async warmUp(): Promise<void> {
    for (let i = 0; i < 3; i++) await this.run(1, (tag) => this.queue.add("w", { tag }));
    await this.run(100, (tag) => this.addMany(tag, 100));
    await this.run(3, (tag) => this.flows.add(bullChain(QUEUE, tag, 3)));
  }

  private async addMany(tag: string, n: number): Promise<void> {
    await this.queue.addBulk(Array.from({ length: n }, (_, i) => ({ name: `i${i}`, data: { tag } })));
  }

  /** Submits with `submit` and waits for `jobs` completions. */
  private async run(jobs: number, submit: (tag: string) => Promise<unknown>, timeoutMs = 300_000) {
    const tag = this.tag("run");
    const t0 = now();
    await submit(tag);
    const end = await this.completions.nth(tag, jobs, timeoutMs);
    return { t0, end, tag };
  }

  /** One shape, counted: quiet before, submit, every job completed, quiet after. */
  private async cost(jobs: number, submit: (tag: string) => Promise<unknown>): Promise<ShapeCost> {
    const before = await this.counter.quiet();
    const sentBefore = ioredisSent.commands;
    const cpuBefore = cpuSample();
    const { t0, end } = await this.run(jobs, submit);
    const cpu = cpuBetween(cpuBefore, cpuSample(), ["bench", "redis-server"]);
    const after = await this.counter.quiet();
    return {
      jobs,
      executed: executedBetween(before, after),
      sent: ioredisSent.commands - sentBefore,
      wallMs: end - t0,
      cpu,
    };
  }

  lone = () => this.cost(1, (tag) => this.queue.add("l", { tag }));
  independent = (n: number) => this.cost(n, (tag) => this.addMany(tag, n));
  tree = (n: number) => this.cost(n, (tag) => this.flows.add(bullTree(QUEUE, tag, n)));

  /** `samples` lone jobs one after another: when each began, and completed. */
  async loneTimings(samples: number): Promise<LoneTimings> {
    await this.counter.quiet();
    const start: number[] = [];
    const applied: number[] = [];
    const cpuBefore = cpuSample();
    for (let i = 0; i < samples; i++) {
      const { t0, end, tag } = await this.run(1, (tag) => this.queue.add("s", { tag }), 30_000);
      applied.push(end - t0);
      const began = this.completions.startOf(tag);
      if (began !== undefined) start.push(began - t0);
      await sleep(20);
    }
    const cpu = cpuBetween(cpuBefore, cpuSample(), ["bench", "redis-server"]);
    return { start, applied, cpuPerJob: (cpu.total ?? 0) / samples };
  }

  /** `samples` chains of `length` jobs: submit → the last job completed, ms. */
  async chainTimings(samples: number, length: number): Promise<number[]> {
    await this.counter.quiet();
    const times: number[] = [];
    for (let i = 0; i < samples; i++) {
      const { t0, end } = await this.run(length, (tag) => this.flows.add(bullChain(QUEUE, tag, length)), 60_000);
      times.push(end - t0);
      await sleep(20);
    }
    return times;
  }

  /**
   * An idle worker over `windowMs` with `waiting` jobs waiting in a paused queue (as the
   * coordinator's paused context holds them). Its own worker on its own queue.
   */
  async idle(windowMs: number, waiting: number): Promise<ShapeCost> {
    const queue = new Queue(IDLE_QUEUE, { connection: this.connect(), prefix: PREFIX });
    await queue.pause();
    await queue.addBulk(Array.from({ length: waiting }, (_, i) => ({ name: `q${i}`, data: { tag: "idle" } })));
    await this.openWorker(IDLE_QUEUE);
    try {
      const before = await this.counter.quiet();
      const sentBefore = ioredisSent.commands;
      const cpuBefore = cpuSample();
      await sleep(windowMs);
      const cpu = cpuBetween(cpuBefore, cpuSample(), ["bench", "redis-server"]);
      const sent = ioredisSent.commands - sentBefore;
      // Read at the window's end, not once quiet: an idle worker is never quiet for long.
      const after = await this.counter.read();
      return { jobs: waiting, executed: executedBetween(before, after), sent, wallMs: windowMs, cpu };
    } finally {
      await this.closeWorker();
      await queue.close();
    }
  }

  async close(): Promise<void> {
    await this.closeWorker();
    await this.flows.close();
    await this.queue.close();
    for (const c of this.connections) c.disconnect();
  }
}
