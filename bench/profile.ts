/**
 * A CPU profile of the Worker's isolate under `wrangler dev`, taken through its inspector (the
 * Chrome DevTools protocol): `npm run bench -- --profile FILE`. The file opens in Chrome's
 * DevTools (Performance) or any `.cpuprofile` viewer; the summary printed names where the time
 * went, by function, on its own and with what it called.
 */
import WebSocket from "ws";

/** The profile as the inspector gives it (the parts the summary reads). */
export interface CpuProfile {
  nodes: { id: number; callFrame: { functionName: string }; children?: number[] }[];
  samples: number[];
  /** µs from the sample before (the first: from the start). */
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** Samples every 200 µs: fine enough for functions of a few µs, light enough not to skew. */
const SAMPLING_INTERVAL_US = 200;

/** Profiles the Worker behind the inspector on `port` while `work` runs. */
export async function profileWorker<T>(
  port: number,
  work: () => Promise<T>,
): Promise<{ profile: CpuProfile; result: T }> {
  const targets = (await (await fetch(`http://127.0.0.1:${port}/json`)).json()) as { webSocketDebuggerUrl: string }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`no inspector target on port ${port}`);
  // The inspector takes connections from local origins only, and asks a client to say which.
  const socket = new WebSocket(url, { headers: { Origin: "http://localhost" } });
  await new Promise<void>((resolve, reject) => {
    socket.once("open", () => resolve());
    socket.once("error", (error) =>
      reject(new Error(`the inspector at ${url} refused the connection: ${error.message}`)),
    );
  });
  let next = 0;
  const waiting = new Map<number, (result: unknown) => void>();
  socket.on("message", (data: Buffer) => {
    const message = JSON.parse(data.toString("utf8")) as { id?: number; result?: unknown };
    // wrangler's inspector proxy echoes a call before the answer comes (or in its stead, for
    // calls it answers itself): either settles it, and only Profiler.stop's answer is read.
    if (message.id !== undefined) waiting.get(message.id)?.(message.result);
  });
  const call = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve) => {
      const id = ++next;
      waiting.set(id, resolve);
      socket.send(JSON.stringify({ id, method, params }));
    });
  try {
    await call("Profiler.enable");
    await call("Profiler.setSamplingInterval", { interval: SAMPLING_INTERVAL_US });
    await call("Profiler.start");
    const result = await work();
    let stopped = (await call("Profiler.stop")) as { profile?: CpuProfile } | undefined;
    // The echo came first: the answer follows under the same id.
    while (!stopped?.profile)
      stopped = (await new Promise<unknown>((resolve) => waiting.set(next, resolve))) as typeof stopped;
    return { profile: stopped.profile, result };
  } finally {
    socket.close();
  }
}

/**
 * The longest time one sample stands for. A sample stands for the time since the one before it
 * (`timeDeltas`), but that time is not all work: while the isolate waits (between requests, or
 * with its lock released), the sampler takes none, and the next sample's delta spans the wait.
 */
const MAX_SAMPLE_US = 10 * SAMPLING_INTERVAL_US;

/**
 * The `top` functions by share of the busy time, on their own (self) and with their callees. Each
 * sample counts for the time it stands for, not as one: the sampler takes samples far more
 * densely in some code than in other (70 µs apart in a loop of JavaScript, milliseconds apart
 * across native calls), so counting samples made a function of 1% of the time look like 20%
 * (25 Nov 2026: `changesOf`, which was then taken for a cost that grew with the flow).
 */
export function summarizeProfile(profile: CpuProfile, top = 25): string {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id);
  const name = (id: number) => byId.get(id)?.callFrame.functionName || "(anonymous)";
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  let busy = 0;
  profile.samples.forEach((sample, i) => {
    if (name(sample) === "(idle)") return;
    const us = Math.min(profile.timeDeltas[i] ?? 0, MAX_SAMPLE_US);
    busy += us;
    self.set(name(sample), (self.get(name(sample)) ?? 0) + us);
    // A function counts once per sample however deep it recurses.
    const seen = new Set<string>();
    for (let id: number | undefined = sample; id !== undefined; id = parent.get(id)) {
      const n = name(id);
      if (seen.has(n) || n === "(root)") continue;
      seen.add(n);
      total.set(n, (total.get(n) ?? 0) + us);
    }
  });
  const seconds = (profile.endTime - profile.startTime) / 1e6;
  const rows = (times: Map<string, number>) =>
    [...times.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, top)
      .map(
        ([n, us]) =>
          `  ${((100 * us) / Math.max(1, busy)).toFixed(1).padStart(5)}%  ${(us / 1000).toFixed(0).padStart(5)} ms  ${n}`,
      );
  return [
    `${seconds.toFixed(2)} s profiled, ${(busy / 1e6).toFixed(2)} s of it busy in the isolate; shares of the busy time:`,
    "on its own (self):",
    ...rows(self),
    "with what it called (total):",
    ...rows(total),
  ].join("\n");
}
