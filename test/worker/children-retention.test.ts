import { runInDurableObject } from "cloudflare:test";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { keysUnder } from "../support/prefix.js";
import { failure, testWorker } from "./harness.js";

// A child's retention follows its parent's, through the real Worker in workerd over Redis:
// deleting a parent deletes its children and theirs; retention's sweep keeps a child while its
// parent is kept and removes it with its parent; a child whose parent is gone follows the
// context's windows. The flows take no runner: a child's only job is a sleep of 0, or a wait.

const w = testWorker("children-retention");
afterAll(() => w.cleanup());

let client: CoordinatorClient;
let ctx: number;

beforeAll(async () => {
  client = (await w.newActor()).client;
});
beforeEach(async () => {
  ctx = (await client.createContext()).id;
  await client.templates.put(ctx, "leaf", { jobs: [{ name: "nap", sleep: 0 }] });
  await client.templates.put(ctx, "mid", { jobs: [{ name: "leaf", flow: { template: "leaf", inputs: {} } }] });
});

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
const jobOf = (view: FlowView, name: string) => view.jobs.find((j) => j.name === name);
/** Makes the context due for the sweep now (as in retention.test.ts). */
const dueNow = () => w.redis.exec(["ZADD", w.keys.sweepDue(), "0", String(ctx)]);

/** The flow's view once its job `name` is `status`. */
const jobIs = (flowId: number, name: string, status: string) =>
  eventually(
    async () => {
      const view = await client.loadFlow(ctx, flowId);
      return jobOf(view, name)?.status === status ? view : undefined;
    },
    20_000,
    50,
    `job ${name} of flow ${flowId} ${status}`,
  );

/** A parent (`mid` starts a child from template mid, which starts a grandchild from leaf) and its tree, all ended but `also`. */
async function tree(also: { name: string; wait: { event: string; timeout: number } }[] = []) {
  const extra = also.map((j) => ({ ...j, depends: ["mid"] }));
  const parent = await client.submitFlow(ctx, {
    start: true,
    jobs: [{ name: "mid", flow: { template: "mid", inputs: {} } }, ...extra],
  });
  const child = jobOf(await jobIs(parent.id, "mid", "finished"), "mid")?.child_flow_id as number;
  const grandchild = jobOf(await jobIs(child, "leaf", "finished"), "leaf")?.child_flow_id as number;
  expect((await client.loadFlow(ctx, grandchild)).status).toBe("finished");
  return { parent: parent.id, child, grandchild };
}

const gone = async (flowId: number) => (await failure(client.loadFlow(ctx, flowId))).status;
/** What a flow's object keeps in its storage. */
const storedIn = (flowId: number) =>
  runInDurableObject(w.flowStub(ctx, flowId).stub, async (_i, state) => [...(await state.storage.list()).keys()]);

describe("deleting a parent flow", () => {
  it("deletes its child and grandchild with all they own; again is 404, and a child deleted before is fine", async () => {
    const t = await tree();
    expect((await client.loadFlow(ctx, t.parent)).status).toBe("finished");
    await client.lifecycle.deleteFlow(ctx, t.parent);
    for (const id of [t.parent, t.child, t.grandchild]) {
      expect(await gone(id)).toBe(404);
      expect(await storedIn(id)).toEqual([]);
    }
    const left = await keysUnder(w.redis, w.keys.namespace(ctx));
    for (const id of [t.parent, t.child, t.grandchild])
      expect(left.filter((k) => k.endsWith(`:flow:${id}`))).toEqual([]);
    expect((await client.loadContext(ctx)).stored).toMatchObject({ jobs: 0, ended: { finished: 0, error: 0 } });
    expect((await failure(client.lifecycle.deleteFlow(ctx, t.parent))).status).toBe(404);

    // A child deleted on its own first: its parent's deletion still goes through, and takes the grandchild.
    const u = await tree();
    await client.lifecycle.deleteFlow(ctx, u.grandchild);
    await client.lifecycle.deleteFlow(ctx, u.parent);
    for (const id of [u.parent, u.child, u.grandchild]) expect(await gone(id)).toBe(404);
  });
});

describe("deleting a parent flow that was re-run", () => {
  it("deletes the children of its earlier runs too, after their start keys expired", async () => {
    const t = await tree();
    const parent = await client.loadFlow(ctx, t.parent);
    await client.rerunFlow(ctx, t.parent, { from: "mid", run: parent.run });
    const again = jobOf(await jobIs(t.parent, "mid", "finished"), "mid")?.child_flow_id as number;
    expect(again).not.toBe(t.child);
    // The start keys of both runs' children expire after a day: gone here, only the record knows.
    const mid = jobOf(parent, "mid")?.id as number;
    for (const attempt of [1, 2])
      await w.redis.exec(["DEL", w.keys.idempotency(ctx, parent.caller_id, `child:${t.parent}:${mid}:${attempt}`)]);
    await client.lifecycle.deleteFlow(ctx, t.parent);
    for (const id of [t.parent, t.child, t.grandchild, again]) expect(await gone(id)).toBe(404);
  });
});

describe("retention of child flows", () => {
  it("keeps an ended child past its window while its parent runs, and removes it with its parent", async () => {
    await client.lifecycle.setRetention(ctx, { finished_seconds: 1, error_seconds: 1 });
    const t = await tree([{ name: "hold", wait: { event: "hold", timeout: 600 } }]);
    expect((await client.loadFlow(ctx, t.parent)).status).toBe("started");
    expect((await client.loadContext(ctx)).stored.ended).toEqual({ finished: 2, error: 0 });
    await pause(1_100);
    await dueNow();
    await w.sweep();
    // Past their window, but their parent is there: both kept, their entries waiting a window on.
    for (const id of [t.child, t.grandchild]) expect((await client.loadFlow(ctx, id)).status).toBe("finished");
    expect((await client.loadContext(ctx)).stored.ended).toEqual({ finished: 2, error: 0 });

    await client.sendEvent(ctx, { name: "hold", data: {} });
    await jobIs(t.parent, "hold", "finished");
    await pause(1_100);
    await dueNow();
    await w.sweep();
    for (const id of [t.parent, t.child, t.grandchild]) expect(await gone(id)).toBe(404);
    expect((await client.loadContext(ctx)).stored).toMatchObject({ jobs: 0, ended: { finished: 0, error: 0 } });
  });

  it("lets a child whose parent is gone follow the context's windows", async () => {
    await client.lifecycle.setRetention(ctx, { finished_seconds: 1, error_seconds: 1 });
    const t = await tree([{ name: "hold", wait: { event: "hold", timeout: 600 } }]);
    // The parent's record gone, as when its removal could not know this child (an attempt's
    // child before a re-run, once its start's key expired).
    await w.redis.exec(["DEL", w.keys.flow(ctx, t.parent)]);
    await pause(1_100);
    await dueNow();
    await w.sweep();
    // The child is removed on its own, and its removal takes the grandchild (kept while the child was there).
    expect(await gone(t.child)).toBe(404);
    expect(await gone(t.grandchild)).toBe(404);
  });
});
