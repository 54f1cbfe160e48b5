import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FlowView } from "../../shared/model/index.js";
import { ARTIFACTS, openBrowser, type TestBrowser } from "../support/browser.js";
import { usePrivateStack, type StackActor } from "../support/use-private-stack.js";

// The web console in a real browser (Debian's chromium driven by playwright-core) against a
// stack of this file's own (wrangler dev serving the console's assets and the API, redis-server,
// the reference runner running real sh jobs). The tests run in order, as a person would: sign in,
// watch a diamond flow run, read why a job failed, re-run it. Every wait is on the page's state.

const { stack, admin } = usePrivateStack("console");
const tmp = mkdtempSync(path.join(tmpdir(), "fc-console-"));
const files = {
  key: path.join(tmp, "actor-key.json"),
  /** Job a waits for this file: the test decides when a running job finishes. */
  gate: path.join(tmp, "gate"),
  /** Job b fails while this file is missing: the re-run succeeds once it exists. */
  fix: path.join(tmp, "fix"),
};
let browser: TestBrowser;
let contextId: number;
let flow: FlowView;
/** Job ids by name, in the diamond. */
const jobs = new Map<string, number>();

const node = (name: string, status?: string) =>
  browser.page.locator(`svg.dag g.node[data-job="${jobs.get(name)}"]${status ? `[data-status="${status}"]` : ""}`);

beforeAll(async () => {
  browser = await openBrowser();
  writeFileSync(files.key, JSON.stringify(admin().jwk), { mode: 0o600 });
});

afterAll(async () => {
  await browser?.close();
  rmSync(tmp, { recursive: true, force: true });
});

describe("the web console", () => {
  it("signs in with a flowc key file, keeping the key non-extractable in IndexedDB", async () => {
    const { page } = browser;
    // The page that holds the key runs only its own script and talks only to its own origin.
    const served = await fetch(`${stack().url}/console/`);
    expect(served.headers.get("content-security-policy")).toContain("script-src 'self'; style-src 'self'");
    expect(served.headers.get("content-security-policy")).toContain("connect-src 'self'");
    await page.goto(`${stack().url}/console`);
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-signin.png") });
    await page.locator("#key-file").setInputFiles(files.key);
    await page.getByRole("button", { name: "Sign in" }).click();
    // No actor id typed: the coordinator says which actor the key is.
    await page
      .getByTestId("actor")
      .filter({ hasText: `actor ${admin().id}` })
      .waitFor();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();

    const stored = await page.evaluate(async () => {
      const db = await new Promise<IDBDatabase>((resolve, reject) => {
        const request = indexedDB.open("flowc-console");
        request.onsuccess = () => resolve(request.result);
        request.onerror = () => reject(request.error);
      });
      const session = await new Promise<{ key: CryptoKey; keyid: string }>((resolve, reject) => {
        const request = db.transaction("session").objectStore("session").get("current");
        request.onsuccess = () => resolve(request.result as { key: CryptoKey; keyid: string });
        request.onerror = () => reject(request.error);
      });
      db.close();
      const exported = await crypto.subtle.exportKey("jwk", session.key).then(
        () => "exported",
        (error: Error) => error.name,
      );
      const { key } = session;
      return {
        keyid: session.keyid,
        extractable: key.extractable,
        usages: key.usages,
        alg: key.algorithm.name,
        exported,
      };
    });
    expect(stored).toEqual({
      keyid: `actor:${admin().id}`,
      extractable: false,
      usages: ["sign"],
      alg: "Ed25519",
      exported: "InvalidAccessError",
    });
    // Only signatures left the browser: the private key is in no request.
    expect(browser.sent.filter((r) => JSON.stringify(r).includes(admin().jwk.d))).toEqual([]);
    const signedAs = (keyid: string) =>
      browser.sent.filter((r) => r.headers["signature-input"]?.includes(`keyid="${keyid}"`)).map((r) => r.url);
    // The bare key asked whose it is (GET /v1/whoami), and registered nothing: it is the admin's.
    expect(signedAs(`key:${admin().jwk.x}`)).toEqual([`${stack().url}/v1/whoami`]);
    expect(signedAs(`actor:${admin().id}`)).toContain(`${stack().url}/v1/actors/${admin().id}`);
  });

  it("lists the actor's contexts and a context's flows, live", async () => {
    const { page } = browser;
    const ctx = await admin().client.createContext();
    contextId = ctx.id;
    const runner = await stack().registerReferenceRunner(admin().client, contextId, "push");
    await runner.start();
    const slow = (name: string, depends: string[], script: string) => ({
      name,
      script_type: "sh" as const,
      depends,
      env_vars: { GATE: files.gate, FIX: files.fix },
      script,
    });
    flow = await admin().client.submitFlow(contextId, {
      start: false,
      jobs: [
        slow(
          "a",
          [],
          'echo "a waits for its gate"\nwhile [ ! -e "$GATE" ]; do sleep 0.1; done\necho "a=1" > "$RESULT_FILE"\n',
        ),
        slow(
          "b",
          ["a"],
          'if [ -e "$FIX" ]; then echo "b=ok" > "$RESULT_FILE"; else echo "b exploded: $FIX is missing" >&2; exit 3; fi\n',
        ),
        slow("c", ["a"], 'echo "c=1" > "$RESULT_FILE"\n'),
        slow("d", ["b", "c"], 'echo "d=1" > "$RESULT_FILE"\n'),
      ],
    });
    for (const job of flow.jobs) jobs.set(job.key, job.id);

    await page.reload();
    await page.getByRole("link", { name: `Context ${contextId}` }).click();
    const row = page.locator(`tr[data-flow="${flow.id}"]`);
    // In plain words (the API says dispatched, then started).
    await row.locator(".badge", { hasText: "created" }).waitFor();
    // Started from elsewhere (as flowc would): the list follows the context's stream.
    await admin().client.startFlow(contextId, flow.id);
    await row.locator(".badge", { hasText: "running" }).waitFor();
    await page.locator('.live[data-state="live"]').waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-flows.png") });
  });

  it("draws the running diamond and recolours a node as its job moves on, without reloading", async () => {
    const { page } = browser;
    let loads = 0;
    page.on("load", () => loads++);
    await page.getByRole("link", { name: `Flow ${flow.id}` }).click();
    await node("a", "started").waitFor();
    // Pushed by the flow's event stream (a signed SSE fetch), not read again and again.
    await page.locator('.live[data-state="live"]').waitFor();
    expect(browser.requested).toContain(`${stack().url}/v1/contexts/${contextId}/flows/${flow.id}/events`);
    await expect(page.locator("svg.dag g.node").count()).resolves.toBe(4);
    await expect(page.locator("svg.dag path.edge").count()).resolves.toBe(4);
    await node("d", "waiting_for_prerequisites").waitFor();

    writeFileSync(files.gate, "go");
    await node("a", "finished").waitFor();
    await node("c", "finished").waitFor();
    await node("b", "error").waitFor();
    await page.getByTestId("flow-status").getByText("failed").waitFor();
    // d never ran (its dependency b failed): grey and dashed, "not run" and why, not a red error.
    await node("d", "error").and(page.locator(".plain-not-run")).waitFor();
    await expect(node("d").locator("text.sub").textContent()).resolves.toMatch(/^not run: dependency b/);
    await expect(node("b").getAttribute("class")).resolves.toContain("plain-failed");
    expect(loads).toBe(0);
  });

  it("opens the failed job's stderr by keyboard, re-runs the flow from the failure and sees it finish", async () => {
    const { page } = browser;
    await node("b").focus();
    await page.keyboard.press("Enter");
    await page.getByRole("heading", { name: /^Job b/ }).waitFor();
    await page.getByTestId("stderr").getByText(`b exploded: ${files.fix} is missing`).waitFor();
    await page.getByTestId("job-error").waitFor();
    expect(page.url()).toContain(`/jobs/${jobs.get("b")}`);
    // Times are the viewer's: this browser is in Berlin, this test process is not.
    const attempt = page.locator(".job-panel table time").first();
    const instant = new Date((await attempt.getAttribute("datetime")) as string);
    const berlin = new Intl.DateTimeFormat("en-GB", { timeStyle: "medium", timeZone: "Europe/Berlin" });
    const berlinDay = new Intl.DateTimeFormat("en-GB", {
      dateStyle: "medium",
      timeStyle: "medium",
      timeZone: "Europe/Berlin",
    });
    expect([berlin.format(instant), berlinDay.format(instant)]).toContain(await attempt.textContent());
    await expect(page.locator("#zone").textContent()).resolves.toBe("Europe/Berlin");

    writeFileSync(files.fix, "fixed");
    await page.getByRole("button", { name: "Re-run from failure" }).click();
    await node("b", "finished").waitFor();
    await node("d", "finished").waitFor();
    await page.getByTestId("flow-status").getByText("finished").waitFor();
    // The panel followed job b through its new attempt.
    await page.locator(".job-panel .badge", { hasText: "finished" }).waitFor();
    await page.locator(".job-panel table", { hasText: "Dispatched" }).waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-flow.png"), fullPage: true });
    expect(statSync(path.join(ARTIFACTS, "console-flow.png")).size).toBeGreaterThan(10_000);

    // Re-run from b, the flow having finished: b and d run again as run 3, a and c keep theirs.
    await page.getByRole("button", { name: "Re-run from here" }).click();
    await page.getByTestId("flow-run").getByText("run 3").waitFor();
    await page.getByTestId("flow-status").getByText("finished").waitFor();
    const view = await admin().client.loadFlow(contextId, flow.id);
    expect([view.status, view.run]).toEqual(["finished", 3]);
    expect(view.jobs.map((j) => [j.key, j.attempt])).toEqual([
      ["a", 1],
      ["b", 3],
      ["c", 1],
      ["d", 2],
    ]);
  });

  it("shows the runners' load and health, the dead letter of the failed job, and pauses dispatch", async () => {
    const { page } = browser;
    // The reference runner takes several deliveries in one POST: the page says how many.
    const [runner] = (await admin().client.listRunners(contextId)).items;
    await admin().client.updateRunner(contextId, runner?.id ?? 0, { deliveries_per_post: 4 });
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/runners`);
    await page.locator("tr[data-runner] .badge", { hasText: "healthy" }).waitFor();
    await page.locator("tr[data-runner] meter").waitFor();
    await page.locator("tr[data-runner] td", { hasText: "· 4 a POST" }).waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-runners.png") });
    await page.getByRole("link", { name: "Dead letters" }).click();
    await page
      .locator("td", { hasText: `b exploded` })
      .or(page.locator("td", { hasText: "exit" }))
      .first()
      .waitFor();
    await page.getByRole("button", { name: "Pause dispatch" }).click();
    await page.getByTestId("dispatch-state").getByText("dispatch paused").waitFor();
    expect((await admin().client.loadContext(contextId)).paused).toBe(true);
    await page.getByRole("button", { name: "Resume dispatch" }).click();
    await page.getByTestId("dispatch-state").getByText("dispatching").waitFor();
  });

  it("draws a 200-job flow legibly, and fits a phone's width", async () => {
    const { page } = browser;
    // 20 layers of 10 steps, each step after two of the layer before.
    const steps = Array.from({ length: 200 }, (_, i) => ({
      name: `step${i}`,
      script: "true",
      script_type: "sh" as const,
      depends: i < 10 ? [] : [...new Set([`step${i - 10}`, `step${i - 10 + (i % 10 === 9 ? 0 : 1)}`])],
    }));
    const big = await admin().client.submitFlow(contextId, { start: false, jobs: steps });
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${big.id}`);
    // More than 100 jobs: the page opens on the jobs table; the DAG is a tab away, fitted to the width.
    await page.getByRole("tab", { name: "Jobs (200)", selected: true }).waitFor();
    await page.getByRole("tab", { name: "DAG" }).click();
    await page.locator("svg.dag g.node").nth(199).waitFor();
    const fitted = await page.locator(".dag-viewport").evaluate((v) => v.scrollWidth - v.clientWidth);
    expect(fitted).toBeLessThanOrEqual(0);
    // At actual size (1:1): 13 px names, no two nodes overlapping; the viewport scrolls instead of shrinking it.
    await page.getByRole("button", { name: "Actual size" }).click();
    const drawn = await page.locator(".dag-viewport").evaluate((viewport) => {
      const boxes = [...viewport.querySelectorAll("g.node rect")].map((r) => r.getBoundingClientRect());
      const overlaps = boxes.filter((a, i) =>
        boxes.some((b, k) => k > i && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom),
      ).length;
      const name = viewport.querySelector("g.node text.name") as SVGTextElement;
      return {
        nodes: boxes.length,
        overlaps,
        fontPx: parseFloat(getComputedStyle(name).fontSize),
        scrolls: viewport.scrollWidth > viewport.clientWidth,
      };
    });
    expect(drawn).toEqual({ nodes: 200, overlaps: 0, fontPx: 13, scrolls: true });
    await page.screenshot({ path: path.join(ARTIFACTS, "console-200-jobs.png") });
    // Cancelling asks for a second press.
    const cancel = page.getByRole("button", { name: "Cancel" });
    await cancel.click();
    await page.getByRole("button", { name: "Press again to cancel" }).click();
    // Cancelled, not "error"; its reason said once ("cancelled: cancelled: …" before).
    await page.getByTestId("flow-status").getByText("cancelled", { exact: true }).waitFor();
    await page.getByText("Cancelled in the console", { exact: true }).waitFor();

    await page.setViewportSize({ width: 375, height: 812 });
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${flow.id}`);
    await node("d", "finished").waitFor();
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-phone.png"), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  it("serves the API reference at /docs from /openapi.json, loading nothing from anywhere else", async () => {
    const { page } = browser;
    const before = browser.requested.length;
    const response = await page.goto(`${stack().url}/docs`);
    // It shares the console's origin, where the signing key lives: it too is held to its own origin.
    expect(response?.headers()["content-security-policy"]).toContain("connect-src 'self'");
    await page.getByRole("heading", { name: "Flow coordinator" }).waitFor();
    await page.getByText("flows", { exact: true }).first().click(); // the sidebar's group of flow routes
    await page.getByText("Submit a flow (admins)").first().waitFor();
    const elsewhere = browser.requested
      .slice(before)
      .filter((url) => !url.startsWith(stack().url) && !url.startsWith("data:"));
    expect(elsewhere).toEqual([]);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-docs.png") });
  });

  it("signs out, deleting the key from the browser", async () => {
    const { page } = browser;
    await page.goto(`${stack().url}/console/`);
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    const left = await page.evaluate(
      () =>
        new Promise<unknown>((resolve, reject) => {
          const open = indexedDB.open("flowc-console");
          open.onsuccess = () => {
            const get = open.result.transaction("session").objectStore("session").get("current");
            get.onsuccess = () => resolve(get.result ?? null);
            get.onerror = () => reject(get.error);
          };
        }),
    );
    expect(left).toBeNull();
    await page.reload();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
  });

  it("said nothing on the console and failed no request along the way", () => {
    expect(browser.errors).toEqual([]);
    expect(existsSync(path.join(ARTIFACTS, "console-flow.png"))).toBe(true);
  });
});

describe("GET /v1/contexts (the console's list of contexts)", () => {
  type ContextList = { items: { id: number }[]; next?: number };
  const list = async (client: StackActor["client"], offset: number, limit: number) =>
    (await client.request("GET", `/v1/contexts?offset=${offset}&limit=${limit}`)) as ContextList;
  /** Every context the client is listed with, following `next` one window of `limit` at a time. */
  const all = async (client: StackActor["client"], limit: number) => {
    const ids: number[] = [];
    for (let offset: number | undefined = 0; offset !== undefined;) {
      const page: ContextList = await list(client, offset, limit);
      ids.push(...page.items.map((c) => c.id));
      offset = page.next;
    }
    return ids;
  };

  it("answers the contexts the caller is in, in any list, a window of the deployment's contexts at a time", async () => {
    const other = await stack().newActor();
    const mine = await admin().client.createContext();
    const theirs = await other.client.createContext();
    const shared = await other.client.createContext({ executors: [admin().id] });
    const forAdmin = await all(admin().client, 1);
    expect(forAdmin).toEqual(expect.arrayContaining([mine.id, shared.id]));
    expect(forAdmin).not.toContain(theirs.id);
    expect(await all(other.client, 2)).toEqual([theirs.id, shared.id]);
    expect(await all(admin().client, 500)).toEqual(forAdmin);
    // Ids are handed out in order and nothing was deleted: context n is at offset n - 1.
    expect(await list(admin().client, theirs.id - 1, 1)).toEqual({ items: [], next: theirs.id });
    expect(await list(admin().client, shared.id - 1, 5)).toEqual({
      items: [expect.objectContaining({ id: shared.id })],
    });
  });

  it("needs a signed actor", async () => {
    const res = await fetch(`${stack().url}/v1/contexts`);
    expect(res.status).toBe(401);
    expect(((await res.json()) as { type: string }).type).toMatch(/signature-missing$/);
  });
});
