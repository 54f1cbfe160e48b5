import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import path from "node:path";
import { parseRedisUrl, RedisConnection } from "../../infra/redis-rest/connection.js";
import { ErrorReply, type Reply } from "../../infra/redis-rest/resp.js";
import { memoryBackedDir } from "../../infra/memory-dir.js";
import { answersPing, freePort, startRedisServer, type RedisServerProcess } from "../../infra/redis-server.js";
import type { Keys } from "../../shared/keys.js";
import { eventually } from "./eventually.js";
import { escapeGlob } from "./prefix.js";

/** Where a cluster's nodes are: what a test file needs to reach (and fault) a cluster it did not start. */
export interface ClusterDescription {
  dir: string;
  nodeTimeoutMs: number;
  /** Each node's client port, the bus port the nodes gossip on, and its folder. */
  nodes: { port: number; busPort: number; dir: string }[];
}

/** How a test cluster is laid out. */
export interface RedisClusterOptions {
  /** Masters, each with one replica (default 3: six processes). */
  masters?: number;
  /**
   * `cluster-node-timeout` (ms): how long a master may be unreachable before it is failed and its
   * replica promoted. Redis's default is 15 s; 1 s makes a failover take a few seconds.
   */
  nodeTimeoutMs?: number;
}

/**
 * Starts a real Redis Cluster of Debian's redis-server: masters with one replica each, on free
 * ports, in a folder of their own (each node's `nodes.conf`; no RDB, no AOF), created with
 * `redis-cli --cluster create … --cluster-replicas 1`, and resolves once it is whole. Settings:
 * `cluster-require-full-coverage no`, so a slot without a master (a failover under way) refuses
 * its own keys (CLUSTERDOWN) while the other slots go on; `cluster-node-timeout` small; DEBUG
 * allowed from local connections (a test's DEBUG SLEEP freezes a master).
 */
export async function startRedisCluster(options: RedisClusterOptions = {}): Promise<RedisCluster> {
  const masters = options.masters ?? 3;
  const dir = mkdtempSync(path.join(memoryBackedDir(), "fc-cluster-"));
  const ports = await distinctFreePorts(masters * 4);
  const nodes = Array.from({ length: masters * 2 }, (_, i) => ({
    port: ports[2 * i] as number,
    busPort: ports[2 * i + 1] as number,
    dir: path.join(dir, `node-${i}`),
  }));
  const cluster = new RedisCluster({ dir, nodeTimeoutMs: options.nodeTimeoutMs ?? 1_000, nodes }, true);
  try {
    await Promise.all(nodes.map((node) => cluster.restart(node.port)));
    await create(nodes.map((n) => n.port));
    await cluster.healthy();
    return cluster;
  } catch (error) {
    await cluster.stop();
    throw error;
  }
}

/**
 * `count` free ports, no two alike: a port is free again once its probe closed, so the system may
 * hand out the same one twice, and a second node on a taken port would find the first one
 * answering its PING.
 */
async function distinctFreePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort());
  return [...ports];
}

/** `redis-cli --cluster create`: slots spread over the first half, a replica each from the second. */
async function create(ports: number[]): Promise<void> {
  const child = spawn(
    "redis-cli",
    ["--cluster", "create", ...ports.map((p) => `127.0.0.1:${p}`), "--cluster-replicas", "1", "--cluster-yes"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0 || !output.includes("[OK] All 16384 slots covered")) {
    throw new Error(`redis-cli --cluster create failed (exit ${code}):\n${output.slice(-3000)}`);
  }
}

/** A node as CLUSTER NODES shows it. */
export interface NodeRow {
  port: number;
  master: boolean;
  failed: boolean;
  slots: [number, number][];
}

/**
 * A cluster: who serves which slot, and the faults a test may inject (a node killed, started
 * again). The process that started it owns its nodes; another (a test file, beside the run's
 * global setup) attaches to it by its description and faults its nodes by their process ids.
 */
export class RedisCluster {
  /** The processes this handle started, by port. */
  private readonly servers = new Map<number, RedisServerProcess>();
  /** Nodes this handle killed and has not started again. */
  private readonly down = new Set<number>();

  constructor(
    readonly description: ClusterDescription,
    private readonly owner = false,
  ) {}

  /** A handle on a cluster another process started. */
  static attach(description: ClusterDescription): RedisCluster {
    return new RedisCluster(description);
  }

  /** `host:port,…` of every node: what the REST endpoint's REDIS_CLUSTER takes. */
  get seeds(): string {
    return this.description.nodes.map((n) => `127.0.0.1:${n.port}`).join(",");
  }

  /** Sends one command to one node (RESP, outside any client's routing); a Redis error is thrown. */
  async call(port: number, ...args: string[]): Promise<Reply> {
    const connection = await RedisConnection.open(parseRedisUrl(`redis://127.0.0.1:${port}`), 2_000);
    try {
      const [reply] = await connection.send([args]);
      if (reply instanceof ErrorReply) throw new Error(`${args[0]} on ${port}: ${reply.message}`);
      return reply ?? null;
    } finally {
      connection.close();
    }
  }

  /** The slot a key hashes to (CLUSTER KEYSLOT, asked of a live node). */
  async slotOf(key: string): Promise<number> {
    return Number(await this.call(this.live()[0] as number, "CLUSTER", "KEYSLOT", key));
  }

  /** The port of the master serving `slot` now, as a live node's CLUSTER NODES tells it. */
  async masterOf(slot: number): Promise<number | undefined> {
    const rows = await this.table();
    return rows.find((n) => n.master && !n.failed && n.slots.some(([a, b]) => a <= slot && slot <= b))?.port;
  }

  /** The ports of the masters serving slots now. */
  async masters(): Promise<number[]> {
    return (await this.table()).filter((n) => n.master && !n.failed && n.slots.length > 0).map((n) => n.port);
  }

  /** A node's id in the cluster (CLUSTER MYID). */
  async idOf(port: number): Promise<string> {
    return String(await this.call(port, "CLUSTER", "MYID"));
  }

  /**
   * Moves a slot from one master to another as `redis-cli --cluster reshard` does, in two steps:
   * `migrate` marks it migrating and moves the keys named (the source answers ASK for them from
   * then on), the function it returns hands the slot over (every master then answers MOVED).
   */
  async migrate(slot: number, from: number, to: number, keys: string[]): Promise<() => Promise<void>> {
    const [fromId, toId] = [await this.idOf(from), await this.idOf(to)];
    await this.call(to, "CLUSTER", "SETSLOT", String(slot), "IMPORTING", fromId);
    await this.call(from, "CLUSTER", "SETSLOT", String(slot), "MIGRATING", toId);
    for (const key of keys) await this.call(from, "MIGRATE", "127.0.0.1", String(to), key, "0", "5000");
    return async () => {
      for (const port of [to, from, ...(await this.masters())]) {
        await this.call(port, "CLUSTER", "SETSLOT", String(slot), "NODE", toId);
      }
    };
  }

  /** Kills a node at once (SIGKILL: no goodbye to the cluster, as a crash or a lost machine). */
  async kill(port: number): Promise<void> {
    const server = this.servers.get(port);
    const pid =
      server?.child.pid ?? Number(/process_id:(\d+)/.exec(String(await this.call(port, "INFO", "server")))?.[1]);
    this.down.add(port);
    this.servers.delete(port);
    process.kill(pid, "SIGKILL");
    await eventually(async () => ((await answersPing(port)) ? undefined : true), 10_000, 20, `node ${port} gone`);
  }

  /**
   * Starts a node (again) on its port and folder: its `nodes.conf` tells it who it was, so a
   * master failed over comes back as its successor's replica.
   */
  async restart(port: number): Promise<void> {
    const node = this.node(port);
    mkdirSync(node.dir, { recursive: true });
    const server = await startRedisServer({
      port: node.port,
      dir: node.dir,
      args: [
        ...["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"],
        ...["--cluster-port", String(node.busPort), "--cluster-node-timeout", String(this.description.nodeTimeoutMs)],
        ...["--cluster-require-full-coverage", "no", "--enable-debug-command", "local"],
      ],
    });
    // Another process may have answered the PING on this port: ours must be the one running.
    await new Promise((r) => setTimeout(r, 50));
    if (server.child.exitCode !== null) throw new Error(`redis-server on port ${port} exited at once: is it taken?`);
    this.servers.set(port, server);
    this.down.delete(port);
  }

  /**
   * Resolves once the cluster is whole again: every live node says `cluster_state:ok` with every
   * slot served, holds no live node failed, and every live replica's link to its master is up
   * (its copy is synchronised: a replica that never synced could not take over).
   */
  async healthy(timeoutMs = 60_000): Promise<void> {
    const live = new Set(this.live());
    await eventually(
      async () => {
        for (const port of live) {
          const info = String(await this.call(port, "CLUSTER", "INFO"));
          if (!info.includes("cluster_state:ok") || !info.includes("cluster_slots_ok:16384")) return undefined;
          if ((await this.table(port)).some((n) => n.failed && live.has(n.port))) return undefined;
          const replication = String(await this.call(port, "INFO", "replication"));
          if (replication.includes("role:slave") && !replication.includes("master_link_status:up")) return undefined;
        }
        return true;
      },
      timeoutMs,
      200,
      "the Redis Cluster being whole",
    );
  }

  /**
   * Stops every node: those this handle started, then (the owner's stop) any other still
   * answering (`SHUTDOWN NOSAVE`: a node a test file started again), and removes the folder.
   */
  async stop(): Promise<void> {
    await Promise.all([...this.servers.values()].map((s) => s.stop()));
    this.servers.clear();
    if (!this.owner) return;
    for (const { port } of this.description.nodes) {
      if (await answersPing(port)) await this.call(port, "SHUTDOWN", "NOSAVE").catch(() => undefined);
    }
    rmSync(this.description.dir, { recursive: true, force: true });
  }

  /** The ports of the nodes that run now (as far as this handle knows). */
  live(): number[] {
    return this.description.nodes.map((n) => n.port).filter((port) => !this.down.has(port));
  }

  /** CLUSTER NODES as a live node sees it: each node's port, role, health and slot ranges. */
  async table(port = this.live()[0] as number): Promise<NodeRow[]> {
    const text = String(await this.call(port, "CLUSTER", "NODES"));
    return text
      .trim()
      .split("\n")
      .map((line) => {
        const [, address, flags, , , , , , ...slots] = line.split(" ");
        return {
          port: Number(/:(\d+)@/.exec(address ?? "")?.[1]),
          master: (flags ?? "").includes("master"),
          failed: /fail|noaddr/.test(flags ?? ""),
          slots: slots
            .filter((s) => /^\d/.test(s))
            .map((s) => s.split("-").map(Number))
            .map(([a, b]) => [a as number, b ?? (a as number)] as [number, number]),
        };
      });
  }

  private node(port: number): ClusterDescription["nodes"][number] {
    const node = this.description.nodes.find((n) => n.port === port);
    if (!node) throw new Error(`no cluster node on port ${port}`);
    return node;
  }
}

/**
 * prefix.ts' queuedIn on a Redis Cluster: SCAN and LLEN asked of the master of the context's slot itself
 * (through the REST endpoint a SCAN sees one master, which may be another).
 */
export async function queuedOnCluster(cluster: RedisCluster, keys: Keys, contextId: number): Promise<number> {
  const prefix = keys.queue(contextId, "sh", 0).replace(/sh:0$/, "");
  const port = await cluster.masterOf(await cluster.slotOf(keys.context(contextId)));
  if (port === undefined) throw new Error(`no master serves context ${contextId}'s slot`);
  const queues = new Set<string>();
  let cursor = "0";
  do {
    const reply = await cluster.call(port, "SCAN", cursor, "MATCH", `${escapeGlob(prefix)}*`, "COUNT", "1000");
    const [next, found] = reply as [Buffer, Buffer[]];
    cursor = next.toString();
    for (const key of found) queues.add(key.toString());
  } while (cursor !== "0");
  let total = 0;
  for (const key of queues) total += Number(await cluster.call(port, "LLEN", key));
  return total;
}
