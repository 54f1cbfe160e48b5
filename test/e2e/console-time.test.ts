import { existsSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { APIResponse, Route } from "playwright-core";
import { beforeAll, describe, expect, it } from "vitest";
import type { FlowView } from "../../shared/model/index.js";
import { ARTIFACTS } from "../support/browser.js";
import { useConsoleBrowser } from "../support/console-browser.js";

// The console's flow page and time, in a real browser (Debian's chromium driven by playwright-core)
// against a stack of this file's own (wrangler dev, redis-server, the reference runner running
// real sh jobs whose ends the test decides by writing files): durations to the millisecond that
// tick while jobs run, plain statuses (failed, not run, cancelled) with the header's counts in
// step with the DAG's nodes even when a read of the flow answers late, the flows list's running
// durations, the timeline (Gantt) with every attempt, live and after a reload, the jobs table of
// a 500-job flow with its filters, and the DAG fitted to a phone's width.

const { stack, admin, keyFile, tmp, browser } = useConsoleBrowser("console-time");
const files = {
  /** `slow` runs until this file exists. */
  gate: path.join(tmp, "gate"),
  /** `fail` fails once this file exists. */
  doom: path.join(tmp, "doom"),
  /** `flaky`'s first attempt leaves this behind; its second finds it and finishes. */
  flaky: path.join(tmp, "flaky"),
  /** The big flow's gated jobs run until this file exists. */
  bigGate: path.join(tmp, "big-gate"),
  /** The flows list's running flow runs until this file exists. */
  hold: path.join(tmp, "hold"),
};
let contextId: number;
let flow: FlowView;
const jobs = new Map<string, number>();

const node = (name: string, status?: string) =>
  browser().page.locator(`svg.dag g.node[data-job="${jobs.get(name)}"]${status ? `[data-status="${status}"]` : ""}`);
const sh = (name: string, script: string, more: Record<string, unknown> = {}) => ({
  name,
  script_type: "sh" as const,
  env_vars: { GATE: files.gate, DOOM: files.doom, FLAKY: files.flaky, BIG_GATE: files.bigGate, HOLD: files.hold },
  script,
  ...more,
});
const untilFile = (variable: string) => `while [ ! -e "$${variable}" ]; do sleep 0.05; done\n`;

/**
 * Watches the page from inside it: at every change of the DOM, the header's counts against the
 * DAG's nodes (by their plain-status class), and every node that went back from an end to
 * running or waiting. Read back with `watched()`.
 */
async function watchFlowPage(): Promise<void> {
  await browser().page.evaluate(() => {
    const seen = { mismatches: [] as string[], regressions: [] as string[] };
    (window as unknown as { seen: typeof seen }).seen = seen;
    const ended = new Map<string, string>();
    new MutationObserver(() => {
      const nodes = [...document.querySelectorAll<SVGGElement>("svg.dag g.node")];
      const fromNodes = new Map<string, number>();
      for (const g of nodes) {
        const word =
          [...g.classList]
            .find((c) => c.startsWith("plain-"))
            ?.slice(6)
            .replace("-", " ") ?? "?";
        fromNodes.set(word, (fromNodes.get(word) ?? 0) + 1);
        const id = g.dataset.job ?? "";
        const status = g.dataset.status ?? "";
        const done = ["finished", "error", "skipped"].includes(status);
        if (ended.has(id) && !done) seen.regressions.push(`job ${id}: ${ended.get(id)} → ${status}`);
        if (done) ended.set(id, status);
      }
      const header = [...document.querySelectorAll<HTMLElement>(".flow-meta .count")].map(
        (c) => `${c.dataset.word}=${c.textContent?.split(" ")[0]}`,
      );
      const counted = [...fromNodes].map(([w, n]) => `${w}=${n}`);
      if (nodes.length > 0 && header.sort().join() !== counted.sort().join())
        seen.mismatches.push(`header ${header.join()} | nodes ${counted.join()}`);
    }).observe(document.querySelector("main") as HTMLElement, {
      subtree: true,
      childList: true,
      attributes: true,
      characterData: true,
    });
  });
}

const watched = () =>
  browser().page.evaluate(() => (window as unknown as { seen: { mismatches: string[]; regressions: string[] } }).seen);

beforeAll(async () => {
  contextId = (await admin().client.createContext()).id;
  const runner = await stack().registerReferenceRunner(admin().client, contextId, "push");
  await runner.start();
  const { page } = browser();
  await page.goto(`${stack().url}/console`);
  await page.locator("#key-file").setInputFiles(keyFile);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Contexts" }).waitFor();
});

describe("the flow page tells time and says statuses plainly", () => {
  it("ticks running jobs, says ms, not run and failed, and keeps its counts with its nodes through a late read", async () => {
    const { page } = browser();
    flow = await admin().client.submitFlow(contextId, {
      start: false,
      jobs: [
        sh("fast", 'echo "ok=1" > "$RESULT_FILE"\n'),
        sh(
          "flaky",
          'if [ -e "$FLAKY" ]; then sleep 0.2; echo "ok=1" > "$RESULT_FILE"; else touch "$FLAKY"; exit 2; fi\n',
          { retries: 1 },
        ),
        sh("slow", `${untilFile("GATE")}echo "ok=1" > "$RESULT_FILE"\n`, { depends: ["fast"] }),
        sh("fail", `${untilFile("DOOM")}echo "fail gives up" >&2; exit 3\n`, { depends: ["fast"] }),
        sh("never", 'echo "ok=1" > "$RESULT_FILE"\n', { depends: ["fail"] }),
      ],
    });
    for (const job of flow.jobs) jobs.set(job.key, job.id);
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${flow.id}`);
    await page.locator('.live[data-state="live"]').waitFor();
    await page.getByRole("tab", { name: "DAG", selected: true }).waitFor();
    await watchFlowPage();
    await admin().client.startFlow(contextId, flow.id);

    // A job of a few milliseconds says so; running jobs tick.
    await node("fast", "finished").waitFor();
    await expect(node("fast").locator("text.time").textContent()).resolves.toMatch(/^\d{1,3} ms$/);
    await node("slow", "started").waitFor();
    await node("flaky", "finished").waitFor();
    const clock = node("slow").locator("text.time");
    const before = await clock.textContent();
    await expect.poll(() => clock.textContent(), { timeout: 5_000 }).not.toBe(before);
    await expect(clock.textContent()).resolves.toMatch(/^\d(\.\d)? s$|^\d+ ms$/);
    const ran = page.getByTestId("flow-took").locator(".took.ticking");
    const ranBefore = await ran.textContent();
    await expect.poll(() => ran.textContent(), { timeout: 5_000 }).not.toBe(ranBefore);
    await expect(node("slow").getAttribute("class")).resolves.toContain("plain-running");
    await page.locator(".flow-meta .count.plain-running", { hasText: "2 running" }).waitFor();

    // From here, reads of the flow's view answer late: each answer is held until events of what
    // came after it were drawn, as a slow network would deliver it.
    const view = `${stack().url}/v1/contexts/${contextId}/flows/${flow.id}`;
    const isView = (url: URL) => url.href === view;
    const held: { route: Route; response: APIResponse }[] = [];
    await page.route(isView, async (route) => held.push({ route, response: await route.fetch() }));
    writeFileSync(files.doom, "now");
    await node("fail", "error").waitFor();
    await node("never", "error").and(page.locator(".plain-not-run")).waitFor();
    await expect(node("never").locator("text.sub").textContent()).resolves.toMatch(/^not run: dependency fail/);
    await page.getByTestId("flow-status").getByText("failed", { exact: true }).waitFor();
    await expect.poll(() => held.length, { timeout: 5_000 }).toBeGreaterThan(0);
    // The read answered with slow still running; slow finishes meanwhile; then the answer arrives.
    writeFileSync(files.gate, "open");
    await node("slow", "finished").waitFor();
    for (const { route, response } of held.splice(0)) await route.fulfill({ response });
    await page.unroute(isView);
    await page.waitForTimeout(300);
    await node("slow", "finished").waitFor();
    await page.locator(".flow-meta .count.plain-finished", { hasText: "3 finished" }).waitFor();
    await expect(page.locator(".flow-meta .count.plain-failed").textContent()).resolves.toBe("1 failed");
    await expect(page.locator(".flow-meta .count.plain-not-run").textContent()).resolves.toBe("1 not run");
    expect(await watched()).toEqual({ mismatches: [], regressions: [] });
    await expect(node("slow").locator("text.time").textContent()).resolves.toMatch(/^\d/);

    // The job panel says the plain status and how long it ran.
    await node("never").click();
    await page.getByTestId("job-status").getByText("not run").waitFor();
    await node("fast").click();
    await page.locator(".job-panel dt", { hasText: "Ran" }).waitFor();
    await expect(
      page.locator(".job-panel dt", { hasText: "Ran" }).locator("xpath=following-sibling::dd[1]").textContent(),
    ).resolves.toMatch(/^\d+ ms$/);
  });

  it("draws every attempt on the timeline, live and again after a reload", async () => {
    const { page } = browser();
    await page.getByRole("tab", { name: "Timeline" }).click();
    const rows = page.locator(".timeline .tl-row");
    await expect.poll(() => rows.count()).toBe(5);
    const flaky = page.locator(`.tl-row[data-job="${jobs.get("flaky")}"] .tl-bar`);
    await expect.poll(() => flaky.count()).toBe(2);
    await expect(flaky.nth(0).getAttribute("class")).resolves.toContain("plain-failed");
    await expect(flaky.nth(1).getAttribute("class")).resolves.toContain("plain-finished");
    await page.locator(`.tl-row[data-job="${jobs.get("never")}"] .tl-none`, { hasText: "not run" }).waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-timeline.png"), fullPage: true });

    // After a reload the view knows flaky's latest attempt only: the first comes from the flow's history.
    await page.reload();
    await page.getByRole("tab", { name: "Timeline" }).click();
    await expect.poll(() => flaky.count()).toBe(2);
    await expect(flaky.nth(0).getAttribute("title")).resolves.toMatch(/^flaky, attempt 1: failed/);
    // A row's name opens the job's panel.
    await page.locator(`.tl-row[data-job="${jobs.get("fail")}"] .tl-label`).click();
    await page.getByRole("heading", { name: /^Job fail/ }).waitFor();
  });

  it("ticks a running flow's duration in the flows list", async () => {
    const { page } = browser();
    const running = await admin().client.submitFlow(contextId, {
      start: true,
      jobs: [sh("hold", `${untilFile("HOLD")}echo "ok=1" > "$RESULT_FILE"\n`)],
    });
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows`);
    const took = page.locator(`tr[data-flow="${running.id}"] .took`);
    await took.waitFor();
    const first = await took.textContent();
    await expect.poll(() => took.textContent(), { timeout: 5_000 }).not.toBe(first);
    writeFileSync(files.hold, "done");
    await page.locator(`tr[data-flow="${running.id}"] .badge`, { hasText: "finished" }).waitFor();
  });
});

describe("a big flow", () => {
  it("opens a 500-job flow on the jobs table, with its filters; the DAG fits the width", async () => {
    const { page } = browser();
    const big = await admin().client.submitFlow(contextId, {
      start: true,
      jobs: [
        sh("boom", 'sleep 0.5; echo "boom" >&2; exit 3\n'),
        ...["gate_a", "gate_b", "gate_c"].map((name) => sh(name, untilFile("BIG_GATE"))),
        ...Array.from({ length: 496 }, (_, i) => sh(`step${i}`, "true\n", { depends: ["boom"] })),
      ],
    });
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${big.id}`);
    await page.getByRole("tab", { name: "Jobs (500)", selected: true }).waitFor();
    await page.getByTestId("flow-status").getByText("failed", { exact: true }).waitFor();
    const rows = page.locator(".job-grid tr[data-job]");
    await expect.poll(() => rows.count()).toBe(500);
    // What needs a look comes first: the failure, then what runs.
    await expect(rows.first().locator("button").textContent()).resolves.toBe("boom");
    await page.getByTestId("grid-status").selectOption("not run");
    await expect.poll(() => rows.count()).toBe(496);
    await page.getByTestId("grid-running-now").check();
    await expect.poll(() => rows.count(), { timeout: 10_000 }).toBe(3);
    await expect(rows.first().locator(".took.ticking").count()).resolves.toBe(1);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-jobs-grid.png"), fullPage: true });
    await page.getByTestId("grid-running-now").uncheck();
    await page.getByTestId("grid-status").selectOption("");
    await page.getByRole("searchbox", { name: "Job name contains" }).fill("step49");
    await expect.poll(() => rows.count()).toBe(7); // step49, step490 … step495
    await rows.first().locator("button").click();
    await page.getByRole("heading", { name: /^Job step49 / }).waitFor();

    // The timeline, live: the gates still run (after their flow failed), so the axis ends at now:
    // their bars reach its end and their times tick, and boom's bar, over, shrinks as time passes.
    await page.getByRole("tab", { name: "Timeline" }).click();
    const row = (key: string) => page.locator(`.tl-row[data-job="${big.jobs.find((j) => j.key === key)?.id}"]`);
    await row("gate_a").locator(".tl-bar.plain-running").waitFor();
    const short = (key: string) =>
      row(key).evaluate((r) => {
        const bar = (r.querySelector(".tl-bar") as HTMLElement).getBoundingClientRect();
        const track = (r.querySelector(".tl-track") as HTMLElement).getBoundingClientRect();
        return { short: Math.round(track.right - bar.right), width: bar.width };
      });
    expect((await short("gate_a")).short).toBeLessThanOrEqual(1);
    const boom = (await short("boom")).width;
    const took = await row("gate_a").locator(".tl-took").textContent();
    await expect.poll(() => row("gate_a").locator(".tl-took").textContent(), { timeout: 5_000 }).not.toBe(took);
    await expect.poll(async () => (await short("boom")).width, { timeout: 5_000 }).toBeLessThan(boom);
    expect((await short("gate_a")).short).toBeLessThanOrEqual(1);

    await page.getByRole("tab", { name: "DAG" }).click();
    await page.locator("svg.dag g.node").nth(499).waitFor();
    const overflow = await page.locator(".dag-viewport").evaluate((v) => v.scrollWidth - v.clientWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    writeFileSync(files.bigGate, "open");
  });
});

describe("on a phone", () => {
  it("fits the DAG to a 390 px screen, top to bottom, and shows the timeline", async () => {
    const { page } = browser();
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${flow.id}`);
    await node("slow", "finished").waitFor();
    const fits = await page.evaluate(() => {
      const viewport = document.querySelector(".dag-viewport") as HTMLElement;
      return {
        page: document.documentElement.scrollWidth - window.innerWidth,
        dag: viewport.scrollWidth - viewport.clientWidth,
      };
    });
    expect(fits.page).toBeLessThanOrEqual(0);
    expect(fits.dag).toBeLessThanOrEqual(0);
    // Top to bottom: a job below the one it depends on.
    const top = (name: string) => node(name).evaluate((g) => g.getBoundingClientRect().top);
    expect(await top("never")).toBeGreaterThan(await top("fail"));
    expect(await top("fail")).toBeGreaterThan(await top("fast"));
    await page.screenshot({ path: path.join(ARTIFACTS, "console-phone-dag.png"), fullPage: true });
    await page.getByRole("tab", { name: "Timeline" }).click();
    await expect.poll(() => page.locator(".timeline .tl-bar").count()).toBeGreaterThan(4);
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-phone-timeline.png"), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });
  });

  it("said nothing on the console and failed no request along the way", () => {
    expect(browser().errors).toEqual([]);
    expect(existsSync(path.join(ARTIFACTS, "console-timeline.png"))).toBe(true);
  });
});
