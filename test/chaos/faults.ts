import { rmSync, writeFileSync } from "node:fs";
import { eventually } from "../support/eventually.js";
import type { PrivateStack } from "../support/private-stack.js";
import type { Random } from "../support/random.js";
import type { RedisCluster } from "../support/redis-cluster.js";
import { pauseClients } from "../support/stack-storage.js";
import type { SoakRunner } from "./invariants.js";

// The soak's faults: drawn by the seed (inject), a failover of a Redis Cluster's master (over a
// cluster), and the healing of whatever may still be on (heal).

/**
 * How a master of a Redis Cluster fails: `kill` (SIGKILL: a crash, a machine lost), `freeze` (DEBUG
 * SLEEP past the node timeout: a stall, after which it acknowledges the writes queued meanwhile and
 * then drops them as it becomes its successor's replica: docs/deploy.md, "What a failover can lose").
 */
export type Failover = "kill" | "freeze";

/**
 * Pausing and freezing the storage. On one redis-server: CLIENT PAUSE, and SIGSTOP of the process.
 * On a Redis Cluster: CLIENT PAUSE of the master serving the soak's context, and of every master
 * (a SIGSTOP past the node timeout would be a failover, which `failover` brings on purpose, once).
 */
export interface StorageFaults {
  pause(ms: number): Promise<string>;
  freeze(ms: number): Promise<string>;
  /** The master of the context's slot fails; resolves once its replica serves the slot and it is back as a replica. */
  failover?(how: Failover): Promise<string>;
  heal(): void;
}

/** The storage faults of a stack over one redis-server of its own. */
export function serverFaults(stack: PrivateStack): StorageFaults {
  return {
    pause: async (ms) => {
      await stack.pauseClients(ms);
      await sleep(ms);
      return `Redis paused ${ms} ms (CLIENT PAUSE)`;
    },
    freeze: async (ms) => {
      stack.pauseRedis();
      await sleep(ms);
      stack.continueRedis();
      return `redis-server frozen ${ms} ms (SIGSTOP)`;
    },
    heal: () => stack.continueRedis(),
  };
}

/** The storage faults of a stack over a Redis Cluster, striking the master of context `ctx`'s slot. */
export function clusterFaults(stack: PrivateStack, cluster: RedisCluster, ctx: number): StorageFaults {
  const master = async () => {
    const slot = await cluster.slotOf(stack.keys.context(ctx));
    return { slot, port: (await cluster.masterOf(slot)) as number };
  };
  const pauseAll = async (ports: number[], ms: number) => {
    await Promise.all(ports.map((port) => pauseClients(`redis://127.0.0.1:${port}`, ms)));
    await sleep(ms);
  };
  return {
    pause: async (ms) => {
      const { port } = await master();
      await pauseAll([port], ms);
      return `the context's master (${port}) paused ${ms} ms (CLIENT PAUSE)`;
    },
    freeze: async (ms) => {
      await pauseAll(await cluster.masters(), ms);
      return `every master paused ${ms} ms (CLIENT PAUSE)`;
    },
    failover: async (how) => {
      const { slot, port } = await master();
      const started = Date.now();
      if (how === "kill") await cluster.kill(port);
      // DEBUG SLEEP answers once the node wakes: not waited for here.
      else void cluster.call(port, "DEBUG", "SLEEP", "3").catch(() => undefined);
      const promoted = await eventually(
        async () =>
          ((p) => (p !== undefined && p !== port ? p : undefined))(await cluster.masterOf(slot).catch(() => undefined)),
        30_000,
        100,
        `a replica serving slot ${slot} in place of ${port}`,
      );
      const took = Date.now() - started;
      if (how === "kill") await cluster.restart(port);
      await cluster.healthy();
      const what = how === "kill" ? "killed (SIGKILL)" : "frozen (DEBUG SLEEP 3)";
      return `failover: the context's master ${port} ${what}, ${promoted} served its slot ${took} ms later; ${port} back as its replica`;
    },
    heal: () => undefined,
  };
}

/** Injects one fault, chosen by the seed, and waits for it to heal (a refusal heals in the background). */
export async function inject(
  stack: PrivateStack,
  storage: StorageFaults,
  runners: SoakRunner[],
  random: Random,
): Promise<string> {
  const pick = Math.floor(random() * 6);
  const ms = (min: number, max: number) => Math.round(min + random() * (max - min));
  switch (pick) {
    case 0:
      return storage.pause(ms(3_000, 10_000));
    case 1:
      return storage.freeze(ms(3_000, 8_000));
    case 2: {
      const down = ms(2_000, 6_000);
      await stack.stopRest();
      await sleep(down);
      await stack.restartRest();
      return `REST endpoint killed for ${down} ms`;
    }
    case 3:
      await stack.restartWorker();
      return "Worker restarted (every Durable Object's memory gone)";
    case 4: {
      const runner = runners[Math.floor(random() * runners.length)] as SoakRunner;
      const down = ms(1_000, 4_000);
      await runner.procs[runner.procs.length - 1]?.kill();
      await sleep(down);
      runner.procs.push(await runner.registered.start());
      return `runner ${runner.registered.id} killed (SIGKILL) for ${down} ms`;
    }
    default: {
      const runner = runners[Math.floor(random() * runners.length)] as SoakRunner;
      const refusing = ms(5_000, 35_000);
      writeFileSync(runner.refuse, "down");
      setTimeout(() => rmSync(runner.refuse, { force: true }), refusing);
      return `runner ${runner.registered.id} refusing (503) for ${refusing} ms`;
    }
  }
}

/** Ends every fault that may still be on. */
export async function heal(stack: PrivateStack, storage: StorageFaults, runners: SoakRunner[]): Promise<void> {
  storage.heal();
  await stack.restartRest();
  for (const runner of runners) rmSync(runner.refuse, { force: true });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
