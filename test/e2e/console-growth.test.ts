import path from "node:path";
import type { Route } from "playwright-core";
import { afterAll, describe, expect, it } from "vitest";
import type { FlowView } from "../../shared/model/index.js";
import { ARTIFACTS } from "../support/browser.js";
import { useConsoleBrowser } from "../support/console-browser.js";

// The console draws a flow that grows, live, in a real browser (Debian's chromium driven by
// playwright-core) against a stack of this file's own with the reference runner: the page is
// open on the flow before it starts, its reads of the flow's view are held back, and a map's
// instances and the jobs a result adds appear in the DAG from the flow's event stream alone
// (job.added), each instance framed with its map's others.

const { stack, admin, keyFile, browser } = useConsoleBrowser("console-growth");
const held: Route[] = [];
let holding = false;

afterAll(async () => {
  holding = false;
  for (const route of held.splice(0)) await route.continue().catch(() => undefined);
});

const sh = (name: string, script: string, extra: Record<string, unknown> = {}) => ({
  name,
  script_type: "sh" as const,
  script,
  ...extra,
});

describe("the console draws jobs that join a flow, live", () => {
  it("adds a map's instances and added jobs to the DAG as the stream tells them", async () => {
    const { page } = browser();
    const contextId = (await admin().client.createContext()).id;
    await (await stack().registerReferenceRunner(admin().client, contextId, "push")).start();
    const added = [sh("extra", "echo extra", { depends: ["seed"] })];
    const flow: FlowView = await admin().client.submitFlow(contextId, {
      start: false,
      jobs: [
        sh("list", `echo 'files=["a","b","c"]' > "$RESULT_FILE"`),
        sh("process", 'sleep 1; echo "done=$ITEM" > "$RESULT_FILE"', {
          depends: ["list"],
          map: { over: "list.files" },
        }),
        sh("summarize", 'echo "$DEP_PROCESS"', { depends: ["process"] }),
        sh("seed", `echo '${JSON.stringify(added)}' > "$JOBS_FILE"`),
      ],
    });
    await page.goto(`${stack().url}/console`);
    await page.locator("#key-file").setInputFiles(keyFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${flow.id}`);
    await page.locator('.live[data-state="live"]').waitFor();
    await expect(page.locator("svg.dag g.node").count()).resolves.toBe(4);
    const map = flow.jobs.find((j) => j.name === "process")?.id;
    expect(await page.locator(`svg.dag g.node[data-job="${map}"]`).getAttribute("data-kind")).toBe("map");

    // From here only the event stream moves the page.
    const view = `${stack().url}/v1/contexts/${contextId}/flows/${flow.id}`;
    holding = true;
    await page.route(
      (url) => url.href === view,
      (route) => {
        if (holding) held.push(route);
        else void route.continue();
      },
    );
    await admin().client.startFlow(contextId, flow.id);
    await page.locator("svg.dag g.node").nth(7).waitFor({ timeout: 30_000 });
    const names = await page.locator("svg.dag g.node text.name").allTextContents();
    expect(names).toEqual(expect.arrayContaining(["process[0]", "process[1]", "process[2]", "extra"]));
    await page.locator(`svg.dag g.map-group[data-map="${map}"]`).waitFor();
    expect(await page.locator(`svg.dag g.map-group[data-map="${map}"] text`).textContent()).toBe("process × 3");
    expect(await page.locator("svg.dag path.edge-map").count()).toBe(3);
    await page.locator(`svg.dag g.node[data-job="${map}"][data-status="finished"]`).waitFor({ timeout: 30_000 });
    await page.screenshot({ path: path.join(ARTIFACTS, "console-growth.png"), fullPage: true });
    holding = false;
    for (const route of held.splice(0)) await route.continue();
  });
});
