import path from "node:path";
import { describe, expect, it } from "vitest";
import { ARTIFACTS } from "../support/browser.js";
import { useConsoleBrowser } from "../support/console-browser.js";

// A context's list of flows in the console, in a real browser (Debian's chromium driven by
// playwright-core) against a stack of this file's own: each flow's name and labels, its status in
// plain words, what started it (manual, a template, a schedule, a parent flow), its priority and
// progress; the filters by status, name and label, kept in the page's address; live.

const { stack, admin, keyFile, browser } = useConsoleBrowser("console-flows", { cron: false });

/** Jobs that take no runner: a long nap, then a short one. */
const naps = [
  { name: "nap", sleep: 3600 },
  { name: "after", sleep: 1, depends: ["nap"] },
];

describe("the console's list of flows", () => {
  it("shows names, labels, plain statuses, triggers, priorities and progress, and filters them", async () => {
    const { page, errors } = browser();
    const { client } = admin();
    const ctx = (await client.createContext()).id;
    const build = await client.submitFlow(ctx, {
      name: "nightly build",
      labels: { env: "prod", team: "web" },
      priority: 5,
      start: true,
      jobs: naps,
    });
    const report = await client.submitFlow(ctx, { name: "nightly report", labels: { env: "dev" }, jobs: naps });
    const dropped = await client.submitFlow(ctx, { start: true, jobs: naps });
    await client.cancelFlow(ctx, dropped.id, "not today");
    await client.templates.put(ctx, "child", { jobs: [{ name: "nap", sleep: 3600 }] });
    const parent = await client.submitFlow(ctx, {
      name: "parent",
      start: true,
      jobs: [{ name: "sub", flow: { template: "child" } }],
    });
    const schedule = await client.schedules.create(ctx, {
      from_template: { name: "child" },
      interval_seconds: 3600,
      paused: true,
    });
    const fired = (await client.schedules.trigger(ctx, schedule.id)).flow_id as number;

    await page.goto(`${stack().url}/console`);
    await page.locator("#key-file").setInputFiles(keyFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();
    await page.goto(`${stack().url}/console/#/contexts/${ctx}/flows`);
    const row = (id: number) => page.locator(`tr[data-flow="${id}"]`);
    await row(build.id).waitFor();
    await expect(page.locator("thead th").allTextContents()).resolves.toEqual([
      "Flow",
      "Name",
      "Status",
      "Trigger",
      "Priority",
      "Progress",
      "Created",
      "Duration",
      "Why",
    ]);
    // Newest first.
    const ids = () =>
      page.locator("tr[data-flow]").evaluateAll((trs) => trs.map((tr) => Number((tr as HTMLElement).dataset.flow)));
    const all = await ids();
    expect(all.slice(0, 1)).toEqual([Math.max(...all)]);
    expect(all).toEqual([...all].sort((a, b) => b - a));

    const cells = async (id: number) => (await row(id).locator("td").allTextContents()).map((t) => t.trim());
    const [, name, status, trigger, priority, progress] = await cells(build.id);
    expect([name, status, trigger, priority, progress]).toEqual([
      "nightly buildenv=prodteam=web",
      "running",
      "manual",
      "5",
      "0/2",
    ]);
    expect((await cells(report.id)).slice(2, 6)).toEqual(["created", "manual", "0", "0/2"]);
    const cancelled = await cells(dropped.id);
    expect([cancelled[1], cancelled[2], cancelled[8]]).toEqual(["—", "cancelled", "not today"]);
    await row(dropped.id).locator(".badge.plain-cancelled").waitFor();
    // A template start is named after its template; a child flow links to its parent.
    const child = (await client.loadFlow(ctx, parent.id)).jobs[0]?.child_flow_id as number;
    expect((await cells(child)).slice(1, 4)).toEqual(["child", "running", `parent flow ${parent.id}`]);
    expect((await cells(fired)).slice(1, 4)).toEqual(["child", "running", `schedule ${schedule.id}`]);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-flows-list.png"), fullPage: true });

    // By a part of the name, then one of a flow's labels clicked: the address keeps both.
    await page.locator("#name-filter").fill("NIGHTLY");
    await page.getByRole("button", { name: "Filter" }).click();
    await page.waitForFunction(() => document.querySelectorAll("tr[data-flow]").length === 2);
    expect(await ids()).toEqual([report.id, build.id]);
    expect(page.url()).toContain("name=NIGHTLY");
    await row(build.id).getByRole("link", { name: "env=prod" }).click();
    await page.waitForFunction(() => document.querySelectorAll("tr[data-flow]").length === 1);
    expect(await ids()).toEqual([build.id]);
    expect(decodeURIComponent(page.url())).toMatch(/name=NIGHTLY&label=env:prod$/);
    await expect(page.locator("#label-filter").inputValue()).resolves.toBe("env:prod");
    await page.screenshot({ path: path.join(ARTIFACTS, "console-flows-filtered.png"), fullPage: true });

    // Live: cancelled elsewhere, the filtered list says so without a reload.
    await client.cancelFlow(ctx, build.id, "enough");
    await row(build.id).locator(".badge", { hasText: "cancelled" }).waitFor();

    // A status, in plain words, with the other filters cleared.
    await page.getByRole("link", { name: "Clear" }).click();
    await page.locator("#status-filter").selectOption({ label: "created" });
    await page.waitForFunction(() => location.hash.endsWith("?status=dispatched"));
    await page.waitForFunction(() => document.querySelectorAll("tr[data-flow]").length === 1);
    expect(await ids()).toEqual([report.id]);
    // A label filter that is not one: the coordinator's problem, said on the page.
    await page.goto(`${stack().url}/console/#/contexts/${ctx}/flows?label=${encodeURIComponent("no spaces:x")}`);
    await page.locator(".form-error", { hasText: "not a label filter" }).waitFor();
    expect(errors.filter((e) => !e.includes("400"))).toEqual([]);
  });
});
