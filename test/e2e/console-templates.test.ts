import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ARTIFACTS, openBrowser, type TestBrowser } from "../support/browser.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// The console's templates in a real browser (Debian's chromium driven by playwright-core)
// against a stack of this file's own: a context's templates with their versions, one template's
// versions and inputs, and the flow page naming the template and version a flow came from.

const { stack, admin } = usePrivateStack("console-templates", { cron: false });
const tmp = mkdtempSync(path.join(tmpdir(), "fc-console-templates-"));
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
