import path from "node:path";
import type { Route } from "playwright-core";
import { afterAll, describe, expect, it } from "vitest";
import type { FlowView } from "../../shared/model/index.js";
import { ARTIFACTS } from "../support/browser.js";
import { useConsoleBrowser } from "../support/console-browser.js";

// The console's DAG for flows that react, in a real browser (Debian's chromium driven by
// playwright-core) against a stack of this file's own (wrangler dev serving the console and the
// API, redis-server, the reference runner running real sh jobs): a wait for an event, a sleep, a
// job whose `when` is false and one skipped after it, a job with rules of its own. While the
// flow runs, the page's reads of the flow's view are held back, so what changes on the page is
// what the flow's event stream told it (job.wait_started, job.sleep_started, job.skipped,
// job.finished) and nothing else. Every wait is on the page's state, never a sleep.

const { stack, admin, keyFile, browser } = useConsoleBrowser("console-waits");
let contextId: number;
let flow: FlowView;
/** Job ids by name. */
const jobs = new Map<string, number>();
/** The page's reads of the flow's view, held while `holding` (released in order afterwards). */
const held: Route[] = [];
let holding = false;

const node = (name: string, status?: string) =>
  browser().page.locator(`svg.dag g.node[data-job="${jobs.get(name)}"]${status ? `[data-status="${status}"]` : ""}`);

/** Nothing drawn in a node runs out of its shape, and no name into its badges. */
async function expectTextInsideNodes(): Promise<void> {
  const outside = await browser()
    .page.locator("svg.dag")
    .evaluate((dag) =>
      [...dag.querySelectorAll<SVGGElement>("g.node")].flatMap((g) => {
        const box = (g.querySelector(".shape") as Element).getBoundingClientRect();
        const parts = [...g.querySelectorAll("text, .icon, .rules-mark")].map((e) => ({
          what: e.textContent || e.getAttribute("class"),
          rect: e.getBoundingClientRect(),
        }));
        const out = parts.filter(({ rect }) => rect.left < box.left || rect.right > box.right).map((p) => p.what);
        const name = g.querySelector("text.name")?.getBoundingClientRect();
        const badges = [...g.querySelectorAll(".kind-badge, .rules-mark")].map((e) => e.getBoundingClientRect().left);
        if (name && badges.length > 0 && name.right > Math.min(...badges)) out.push("the name, into its badges");
        return out.map((what) => `${g.dataset.job}: ${what}`);
      }),
    );
  expect(outside).toEqual([]);
}

afterAll(async () => {
  holding = false;
  for (const route of held.splice(0)) await route.continue().catch(() => undefined);
});

describe("the console draws waits, sleeps and skipped jobs, live", () => {
  it("draws each kind with its own shape and badge before the flow starts", async () => {
    const { page } = browser();
    contextId = (await admin().client.createContext()).id;
    const runner = await stack().registerReferenceRunner(admin().client, contextId, "push");
    await runner.start();
    flow = await admin().client.submitFlow(contextId, {
      start: false,
      jobs: [
        { name: "order", script_type: "sh", script: 'echo "id=42" > "$RESULT_FILE"\n' },
        {
          name: "payment",
          depends: ["order"],
          wait: { event: "order.paid", key: "${DEP_ORDER_ID}", timeout: 3600 },
        },
        { name: "cool_down", sleep: 600 },
        {
          name: "gift",
          depends: ["order"],
          when: 'deps.order.id == "7"',
          script_type: "sh",
          script: "echo never\n",
        },
        { name: "wrap_gift", depends: ["gift"], script_type: "sh", script: "echo never\n" },
        {
          name: "ship",
          depends: ["payment"],
          needs: "all_done",
          allow_failure: true,
          script_type: "sh",
          script: 'echo "shipped=$DEP_PAYMENT_PAID_BY" > "$RESULT_FILE"\n',
        },
      ],
    });
    for (const job of flow.jobs) jobs.set(job.key, job.id);

    await page.goto(`${stack().url}/console`);
    await page.locator("#key-file").setInputFiles(keyFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${flow.id}`);
    await page.locator('.live[data-state="live"]').waitFor();
    await expect(page.locator("svg.dag g.node").count()).resolves.toBe(6);

    // A wait is a hexagon with a ⏸ badge, a sleep a pill with a ☾ badge, a script a box; a job
    // with rules has a ⚑ marker that says them.
    const drawn = await page.locator("svg.dag").evaluate((dag) =>
      [...dag.querySelectorAll<SVGGElement>("g.node")].map((g) => ({
        kind: g.dataset.kind,
        shape: g.querySelector(".shape")?.tagName,
        badge: g.querySelector(".kind-badge title")?.textContent ?? "",
        icon: g.querySelector(".kind-badge .icon")?.classList[1] ?? "",
        rules: g.querySelector(".rules-mark title")?.textContent ?? "",
      })),
    );
    expect(drawn).toEqual(
      expect.arrayContaining([
        { kind: "wait", shape: "polygon", badge: "⏸ wait", icon: "icon-pause", rules: "" },
        { kind: "sleep", shape: "rect", badge: "☾ sleep", icon: "icon-moon", rules: "" },
        { kind: "script", shape: "rect", badge: "", icon: "", rules: "" },
        { kind: "script", shape: "rect", badge: "", icon: "", rules: 'rules: when: deps.order.id == "7"' },
        { kind: "script", shape: "rect", badge: "", icon: "", rules: "rules: needs: all_done · may fail" },
      ]),
    );
    // Before it starts, the wait says what it will wait for (its key not resolved yet).
    await expect(node("payment").locator("text.detail").textContent()).resolves.toBe("order.paid · ${DEP_ORDER_ID}");
    await expect(node("gift").locator("text.detail").textContent()).resolves.toBe('when: deps.order.id == "7"');
    await expect(node("ship").locator("text.detail").textContent()).resolves.toBe("needs: all_done · may fail");
    await expectTextInsideNodes();
  });

  it("shows the wait's event and key, the sleep's end and the skipped jobs, from the flow's events alone", async () => {
    const { page } = browser();
    let loads = 0;
    page.on("load", () => loads++);
    // From here the page's reads of the flow's view wait: only the event stream moves the page.
    const view = `${stack().url}/v1/contexts/${contextId}/flows/${flow.id}`;
    const isView = (url: URL) => url.href === view;
    holding = true;
    await page.route(isView, (route) => {
      if (holding) held.push(route);
      else void route.continue();
    });
    const started = Math.floor(Date.now() / 1000);
    await admin().client.startFlow(contextId, flow.id);

    await node("order", "finished").waitFor();
    await page.locator(".flow-meta span", { hasText: "started" }).locator("time").waitFor();
    await node("payment", "started").waitFor();
    await node("payment")
      .locator("text.detail")
      .filter({ hasText: /^order\.paid · 42 · (59|60) min left$/ })
      .waitFor();
    await expect(node("payment").locator("text.sub").textContent()).resolves.toBe("waiting for its event");

    await node("cool_down", "started").waitFor();
    const sleepEnd = new Intl.DateTimeFormat("en-GB", { timeStyle: "short", timeZone: "Europe/Berlin" });
    const detail = await node("cool_down").locator("text.detail").textContent();
    expect([started + 600, started + 601].map((t) => `until ${sleepEnd.format(new Date(t * 1000))}`)).toContain(
      detail?.split(" · ")[0],
    );
    expect(detail).toMatch(/ · (9|10) min left$/);

    // gift's `when` is false: skipped, and wrap_gift after it (needs: all_finished), dashed and grey.
    await node("gift", "skipped").waitFor();
    await node("wrap_gift", "skipped").waitFor();
    await expect(node("gift").locator("text.sub").textContent()).resolves.toBe("not run");
    await expect(node("gift").locator("text.detail").textContent()).resolves.toMatch(/^when is false: deps\.order/);
    await expect(node("wrap_gift").locator("text.sub").textContent()).resolves.toMatch(/^not run: dependency gift.*…$/);
    await expect(node("wrap_gift").locator("title").first().textContent()).resolves.toContain(
      "skipped: dependency gift was skipped (needs: all_finished)",
    );
    const dashed = await node("gift")
      .locator(".shape")
      .evaluate((shape) => getComputedStyle(shape).strokeDasharray);
    expect(dashed).toMatch(/^5(px)?,? 4(px)?$/);
    await expect(node("gift").locator("title").first().textContent()).resolves.toContain(
      'skipped: when is false: deps.order.id == "7"',
    );
    await expectTextInsideNodes();
    // The progress counts the skipped jobs, as not run.
    await page.locator(".flow-meta .count.plain-not-run", { hasText: "2 not run" }).waitFor();

    // The skipped job's panel says why, and its rule.
    await node("gift").click();
    await page.getByRole("heading", { name: /^Job gift/ }).waitFor();
    await expect(page.getByTestId("skip-reason").textContent()).resolves.toBe('when is false: deps.order.id == "7"');
    await page.getByTestId("job-rules").getByText('deps.order.id == "7"').waitFor();

    // A script's panel is as it was: its attempts on a runner and its script.
    await node("order").click();
    await page.getByRole("heading", { name: /^Job order/ }).waitFor();
    await page.locator(".job-panel table", { hasText: "Dispatched" }).waitFor();
    await page.locator(".job-panel summary", { hasText: "Script (sh)" }).waitFor();

    // The wait's panel: the event, its resolved key and timeout; what a timeout does; no runner.
    await node("payment").click();
    await page.getByRole("heading", { name: /^Job payment/ }).waitFor();
    await expect(page.getByTestId("job-wait").textContent()).resolves.toBe(
      'order.paid with key "42", times out after 1 h 00 min',
    );
    await page.getByTestId("job-waiting").getByText('event: waiting for event order.paid with key "42"').waitFor();
    const fact = (term: string) =>
      page.locator(".job-panel dt", { hasText: term }).locator("xpath=following-sibling::dd[1]");
    await expect(fact("On timeout").textContent()).resolves.toBe("error");
    await expect(fact("Key, as written").textContent()).resolves.toBe("${DEP_ORDER_ID}");
    await expect(page.locator(".job-panel dt", { hasText: /^Runner$/ }).count()).resolves.toBe(0);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-waits.png"), fullPage: true });

    // The event arrives: the wait finishes with its data, live, and the job after it runs.
    const sent = await admin().client.sendEvent(contextId, {
      id: "paid-42",
      name: "order.paid",
      key: "42",
      data: { paid_by: "card" },
    });
    expect(sent).toMatchObject({ matched: 1, resumed: 1 });
    await node("payment", "finished").waitFor();
    await expect(node("payment").locator("text.detail").textContent()).resolves.toBe("order.paid · 42");
    await page.locator(".job-panel .badge", { hasText: "finished" }).waitFor();
    await page.locator(".job-panel td code", { hasText: "card" }).waitFor();
    await node("ship", "finished").waitFor();
    await page.locator(".flow-meta .count.plain-finished", { hasText: "3 finished" }).waitFor();
    // All of it from the stream: the page never loaded again, and every read of the view it made
    // meanwhile (one a second at most after events) is held still, unanswered.
    expect(loads).toBe(0);
    await expect.poll(() => held.length).toBeGreaterThan(0);

    // The reads let through: the view read again agrees with what the events drew.
    holding = false;
    for (const route of held.splice(0)) await route.continue();
    await page.unroute(isView);
    await node("payment", "finished").waitFor();
    await node("gift", "skipped").waitFor();
    await node("cool_down", "started").waitFor();
    await expect(node("cool_down").locator("text.detail").textContent()).resolves.toMatch(
      new RegExp(`^${detail?.split(" · ")[0]} · `),
    );
  });

  it("said nothing on the console and failed no request along the way", async () => {
    await admin().client.cancelFlow(contextId, flow.id, "done looking");
    await node("cool_down", "error").waitFor();
    await expect(node("cool_down").locator("text.detail").textContent()).resolves.toBe("cancelled: done looking");
    expect(browser().errors).toEqual([]);
  });
});
