import path from "node:path";
import { describe, expect, it } from "vitest";
import { readFlowFile } from "../../cli/flowfile.js";
import { actorKeyId } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import { FlowStreamEvent, type FlowView } from "../../shared/model/index.js";
import { actorEnv, flowc } from "../support/flowc.js";
import { flowEnd } from "../support/flow-runs.js";
import { parsed, readSse, type SseEvent } from "../support/streams.js";
import { usePrivateStack } from "../support/use-private-stack.js";

/**
 * Flows that grow, end to end: the reference runner (real python and sh processes) runs
 * examples/map.yaml (a list, one instance per item, a summary) and examples/grow.yaml (a job that
 * adds jobs through $JOBS_FILE) on a private stack (redis-server, REST endpoint, wrangler dev);
 * the flow's stream tells each job that joined it (`job.added`) before anything else of it, and
 * `flowc` watches, shows and draws them.
 */

const root = path.resolve(import.meta.dirname, "../..");
const { stack, admin } = usePrivateStack("growth");

/** A fresh context with a reference runner of that mode, started. */
async function contextWithRunner(mode: "push" | "pull"): Promise<number> {
  const { id } = await admin().client.createContext();
  await (await stack().registerReferenceRunner(admin().client, id, mode)).start();
  return id;
}

/** Submits an example flow file (started), and reads its whole stream to its end. */
async function runExample(contextId: number, file: string): Promise<{ view: FlowView; events: FlowStreamEvent[] }> {
  const body = readFlowFile(path.join("examples", file), root).body as FlowSubmissionInput;
  const flow = await admin().client.submitFlow(contextId, { ...body, start: true });
  const ended = (events: SseEvent[]) => events.some((e) => e.event === "flow.finished" || e.event === "flow.error");
  const url = `${stack().url}/v1/contexts/${contextId}/flows/${flow.id}/events`;
  const signer = await signerFromJwk(admin().jwk, actorKeyId(admin().id));
  const read = await readSse(url, signer, ended, { timeoutMs: 90_000 });
  const events = parsed<FlowStreamEvent>(read.events).map((e) => FlowStreamEvent.parse(e));
  return { view: await flowEnd(admin().client, contextId, flow.id), events };
}

/** Each job the stream told as added comes before any other event of it. */
function addedFirst(events: FlowStreamEvent[]): FlowStreamEvent[] {
  const added = events.filter((e) => e.type === "job.added");
  for (const event of added) {
    const first = events.find((e) => e.job_id === event.job_id);
    expect(first?.type).toBe("job.added");
  }
  return added;
}

describe("flows that grow, with the reference runner", () => {
  it("runs examples/map.yaml: one instance per file, each with its item, then the summary of all", async () => {
    const ctx = await contextWithRunner("push");
    const { view, events } = await runExample(ctx, "map.yaml");
    expect(view.status).toBe("finished");
    const map = view.jobs.find((j) => j.name === "process");
    expect(map).toMatchObject({ kind: "map", status: "finished", instances: expect.any(Array) });
    const instances = view.jobs.filter((j) => j.map_of === map?.id);
    expect(instances.map((j) => j.name)).toEqual(["process[0]", "process[1]", "process[2]", "process[3]"]);
    expect(instances.map((j) => view.result[j.key])).toEqual([
      { file: "intro.txt", words: "5" },
      { file: "map.txt", words: "10" },
      { file: "notes.txt", words: "8" },
      { file: "empty.txt", words: "0" },
    ]);
    expect(view.result.summarize).toEqual({ files: "4", words: "23" });
    const added = addedFirst(events);
    expect(added.map((e) => e.job?.key)).toEqual(instances.map((j) => j.key));
    expect(added.every((e) => e.job?.map_of === map?.id && e.job?.kind === "script")).toBe(true);
  });

  it("runs examples/grow.yaml: the jobs plan wrote join the flow, wait as they say, and run", async () => {
    const ctx = await contextWithRunner("pull");
    const { view, events } = await runExample(ctx, "grow.yaml");
    expect(view.status).toBe("finished");
    const plan = view.jobs.find((j) => j.name === "plan");
    expect(view.jobs.map((j) => j.name)).toEqual([
      "plan",
      "gate",
      "check-north",
      "check-south",
      "check-west",
      "report",
    ]);
    expect(view.jobs.slice(2).every((j) => j.added_by === plan?.id)).toBe(true);
    expect(view.result.report).toEqual({ regions: "3", ok: "3" });
    const added = addedFirst(events);
    expect(added.map((e) => e.job?.key)).toEqual(["check-north", "check-south", "check-west", "report"]);
    const gate = view.jobs.find((j) => j.name === "gate")?.id;
    expect(added.at(-1)?.job?.depends).toContain(gate);
    // Added with plan's result, in the same transition: nothing of theirs before plan finished.
    const planEnd = events.findIndex((e) => e.type === "job.finished" && e.job_id === plan?.id);
    expect(events.findIndex((e) => e.type === "job.added")).toBe(planEnd + 1);
  });
});

describe("flowc and a flow that grows", () => {
  it("watches a map's instances join, shows and draws them with their map", async () => {
    const ctx = String(await contextWithRunner("push"));
    const env = actorEnv(stack(), admin());
    const watched = await flowc(["flow", "submit", ctx, "examples/map.yaml", "--start", "--watch"], env);
    expect(watched.code).toBe(0);
    expect(watched.stdout).toMatch(/⇉ process maps its list/);
    for (let i = 0; i < 4; i++) expect(watched.stdout).toContain(`+ process[${i}] added: item ${i} of process`);
    expect(watched.stdout).toMatch(/✓ summarize finished {2}.*files=4, words=23/);
    const flowId = /^flow (\d+) submitted/m.exec(watched.stdout)?.[1] ?? "?";
    const shown = await flowc(["flow", "show", ctx, flowId], env);
    expect(shown.stdout).toMatch(/^process\s+\d+\s+map:python\s+✓ finished/m);
    expect(shown.stdout).toMatch(/^process\[2\]\s+\d+\s+python\s+✓ finished\s+1\s+\d+\s+item 2 of process/m);
    const drawn = await flowc(["flow", "dag", ctx, flowId], env);
    expect(drawn.stdout).toMatch(/✓ process\[3\]\s+python\s+finished\s+\(item 3 of process\)/);
    expect(drawn.stdout).toMatch(/✓ summarize\s+python\s+finished\s+← process/);
  });
});
