import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ARTIFACTS, openBrowser, type TestBrowser } from "../support/browser.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// The console's context pages beyond flows, in a real browser (Debian's chromium driven by
// playwright-core) against one stack of this file's own (one wrangler start for them all):
// templates (a context's templates with their versions, one template's versions and inputs, the
// flow page naming the template a flow came from), schedules (the cron in words, the next fires,
// recent runs linked to their flows, pause / resume / trigger), a runner's registered concurrency
// on the runners page, sign-in with a key that is nobody's or a runner's, and the API reference.

const { stack, admin } = usePrivateStack("console-pages", { cron: false });
const tmp = mkdtempSync(path.join(tmpdir(), "fc-console-pages-"));
const keyFile = path.join(tmp, "actor-key.json");
let browser: TestBrowser;

beforeAll(async () => {
  browser = await openBrowser();
  writeFileSync(keyFile, JSON.stringify(admin().jwk), { mode: 0o600 });
});

afterAll(async () => {
  await browser?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const nap = (description: string) => ({
  description,
  inputs: { who: { type: "string" as const, default: "world", description: "whom to greet" } },
  env_vars: { WHO: "${inputs.who}" },
  jobs: [{ name: "nap", sleep: 3600 }],
});

describe("the console shows templates", () => {
  it("lists a context's templates, a template's versions and inputs, and where a flow came from", async () => {
    const { page, errors } = browser;
    const { client, id: actorId } = admin();
    const ctx = (await client.createContext()).id;
    await client.templates.put(ctx, "nap", nap("a nap"));
    await client.templates.put(ctx, "nap", nap("a longer nap"));
    await client.templates.put(ctx, "other", { jobs: [{ name: "x", sleep: 1 }] });
    const flow = await client.templates.start(ctx, "nap", { version: 1, inputs: { who: "you" } });

    await page.goto(`${stack().url}/console`);
    await page.locator("#key-file").setInputFiles(keyFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();
    await page.goto(`${stack().url}/console/#/contexts/${ctx}/flows`);
    await page.getByRole("link", { name: "Templates" }).click();
    const rows = page.locator("tr[data-template]");
    await rows.first().waitFor();
    await expect(rows.evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.template))).resolves.toEqual([
      "nap",
      "other",
    ]);
    await expect(page.locator('tr[data-template="nap"] td').allTextContents()).resolves.toEqual([
      "nap",
      "2",
      "1 to 2",
      expect.any(String) as unknown as string,
      "a longer nap",
    ]);

    await page.getByRole("link", { name: "nap", exact: true }).click();
    await page.locator("tr[data-version]").first().waitFor();
    await expect(
      page.locator("tr[data-version]").evaluateAll((trs) => trs.map((tr) => (tr as HTMLElement).dataset.version)),
    ).resolves.toEqual(["2", "1"]);
    await expect(page.getByRole("heading", { name: "Inputs of version 2" }).count()).resolves.toBe(1);
    await expect(page.getByRole("cell", { name: "whom to greet" }).count()).resolves.toBe(1);
    await expect(page.locator('tr[data-version="1"]').textContent()).resolves.toContain(`actor ${actorId}`);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-template.png"), fullPage: true });

    await page.goto(`${stack().url}/console/#/contexts/${ctx}/flows/${flow.id}`);
    const origin = page.getByTestId("flow-template");
    await origin.waitFor();
    await expect(origin.textContent()).resolves.toBe("from template nap version 1");
    await origin.getByRole("link", { name: "nap" }).click();
    await page.locator("tr[data-version]").first().waitFor();
    expect(page.url()).toMatch(new RegExp(`#/contexts/${ctx}/templates/nap$`));
    expect(errors).toEqual([]);
  });
});

describe("the console shows schedules", () => {
  it("reads each cron out in words, lists the next fires and the recent runs, and pauses, resumes and triggers", async () => {
    const { page, errors } = browser;
    const { client } = admin();
    const ctx = (await client.createContext()).id;
    const nap = { jobs: [{ name: "nap", sleep: 1 }] };
    const weekdays = await client.schedules.create(ctx, {
      template: nap,
      cron: "0 9 * * MON-FRI",
      timezone: "Europe/Berlin",
      note: "the morning report",
    });
    const quarter = await client.schedules.create(ctx, { template: nap, interval_seconds: 900, paused: true });

    await page.goto(`${stack().url}/console/#/contexts/${ctx}/flows`);
    await page.getByRole("link", { name: "Schedules" }).click();
    const row = (id: number) => page.locator(`tr[data-schedule="${id}"]`);
    await row(weekdays.id).waitFor();
    await expect(row(weekdays.id).getByTestId("cron-words").textContent()).resolves.toBe(
      "at 09:00 Europe/Berlin, Monday to Friday",
    );
    await expect(row(weekdays.id).textContent()).resolves.toContain("0 9 * * MON-FRI (Europe/Berlin)");
    await expect(row(quarter.id).getByTestId("cron-words").textContent()).resolves.toBe("every 15 minutes");
    await expect(row(quarter.id).locator(".badge").textContent()).resolves.toBe("paused");
    await page.screenshot({ path: path.join(ARTIFACTS, "console-schedules.png"), fullPage: true });

    await row(weekdays.id)
      .getByRole("link", { name: `Schedule ${weekdays.id}` })
      .click();
    // Five fires to come, each at 09:00 in Berlin (the browser's zone here), on a weekday.
    const fires = page.getByTestId("upcoming-fires").locator("li time");
    await fires.nth(4).waitFor();
    const instants = await fires.evaluateAll((times) => times.map((t) => t.getAttribute("datetime") as string));
    const berlin = new Intl.DateTimeFormat("en-GB", {
      timeZone: "Europe/Berlin",
      weekday: "short",
      hour: "2-digit",
      minute: "2-digit",
    });
    for (const instant of instants) expect(berlin.format(new Date(instant))).toMatch(/^(Mon|Tue|Wed|Thu|Fri) 09:00$/);
    await page.getByText("It has not fired yet.").waitFor();

    // Trigger now: a flow starts, its run is listed and linked to it.
    await page.getByRole("button", { name: "Trigger now" }).click();
    await page.getByText(/^Triggered: started flow \d+$/).waitFor();
    const run = page.locator('tr[data-outcome="started"]');
    await run.waitFor();
    await expect(run.locator("td").nth(1).textContent()).resolves.toBe("manual");
    const [started] = (await client.schedules.get(ctx, weekdays.id)).recent_runs;
    expect(started?.flow_id).toBeGreaterThan(0);
    await page.screenshot({ path: path.join(ARTIFACTS, "console-schedule.png"), fullPage: true });

    // Pause and resume: the state, the next fires gone and back, as the API says.
    await page.getByRole("button", { name: "Pause", exact: true }).click();
    await page.getByText("None while it is paused.").waitFor();
    expect((await client.schedules.get(ctx, weekdays.id)).paused).toBe(true);
    await page.getByRole("button", { name: "Resume" }).click();
    await fires.nth(4).waitFor();
    expect((await client.schedules.get(ctx, weekdays.id)).paused).toBe(false);

    await run.getByRole("link", { name: `Flow ${started?.flow_id}` }).click();
    await page.getByTestId("flow-status").waitFor();
    expect(page.url()).toMatch(new RegExp(`#/contexts/${ctx}/flows/${started?.flow_id}$`));
    expect(errors).toEqual([]);
  });
});
