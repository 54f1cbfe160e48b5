import path from "node:path";
import { describe, expect, it } from "vitest";
import { readFlowFile } from "../../cli/flowfile.js";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { ARTIFACTS } from "../support/browser.js";
import { useConsoleBrowser } from "../support/console-browser.js";

// The console's DAG of a saga (examples/saga.yaml), in a real browser (Debian's chromium driven
// by playwright-core) against a stack of this file's own, its jobs and compensations run by the
// reference runner: compensations drawn apart (an undo badge, a dashed arc from the job each
// undoes), then recoloured live as the flow unwinds.

const root = path.resolve(import.meta.dirname, "../..");
const { stack, admin, keyFile, browser } = useConsoleBrowser("console-saga");
let contextId: number;
let flow: FlowView;

const key = (name: string) => flow.jobs.find((j) => j.key === name)?.id;
const node = (name: string) => browser().page.locator(`svg.dag g.node[data-job="${key(name)}"]`);

describe("the console draws a saga's unwinding, live", () => {
  it("draws compensations apart before the flow starts, then as they run once it fails", async () => {
    const { page } = browser();
    contextId = (await admin().client.createContext()).id;
    const runner = await stack().registerReferenceRunner(admin().client, contextId, "push");
    await runner.start();
    const body = readFlowFile(path.join("examples", "saga.yaml"), root).body as FlowSubmissionInput;
    flow = await admin().client.submitFlow(contextId, { ...body, start: false });

    await page.goto(`${stack().url}/console`);
    await page.locator("#key-file").setInputFiles(keyFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();
    await page.goto(`${stack().url}/console/#/contexts/${contextId}/flows/${flow.id}`);
    await page.locator('.live[data-state="live"]').waitFor();
    await expect(page.locator("svg.dag g.node").count()).resolves.toBe(6);

    // Three compensations, each with its undo badge and a dashed arc from its job (no arrowhead).
    await expect(page.locator("svg.dag g.node.compensation").count()).resolves.toBe(3);
    await expect(node("book.compensate").locator(".undo-badge title").textContent()).resolves.toMatch(/compensation/);
    await expect(node("book.compensate").locator("text.detail").textContent()).resolves.toBe("undoes book");
    const arcs = await page
      .locator("svg.dag path.edge.undo")
      .evaluateAll((paths) => paths.map((p) => [p.getAttribute("data-undo"), p.getAttribute("marker-end")]));
    expect(arcs).toEqual(
      expect.arrayContaining(
        ["book", "charge", "ship"].map((job) => [`${key(job)}-${key(`${job}.compensate`)}`, null]),
      ),
    );
    const style = await page
      .locator("svg.dag path.edge.undo")
      .first()
      .evaluate((p) => getComputedStyle(p).strokeDasharray);
    expect(style).not.toBe("none");
    await expect(page.getByRole("button", { name: "Cancel and compensate" }).isVisible()).resolves.toBe(true);

    // Started, ship fails and the flow unwinds: the stream recolours the compensations.
    await page.getByRole("button", { name: "Start" }).click();
    await page.getByTestId("flow-status").getByText("compensated").waitFor({ timeout: 60_000 });
    await node("book.compensate").and(page.locator('[data-status="finished"]')).waitFor();
    await expect(node("charge.compensate").getAttribute("data-status")).resolves.toBe("finished");
    await expect(node("ship.compensate").getAttribute("data-status")).resolves.toBe("skipped");
    await expect(node("ship.compensate").locator("text.detail").textContent()).resolves.toMatch(/^nothing to undo/);
    await expect(page.locator(".flow-error").textContent()).resolves.toMatch(/Job ship failed: exit code 4/);
    await expect(page.locator(".flow-meta").textContent()).resolves.toMatch(/unwinding since/);
    // The panel of a compensation says which job it undoes.
    await node("charge.compensate").click();
    await expect(page.getByTestId("job-undoes").textContent()).resolves.toBe("charge (if the flow unwinds)");
    await page.screenshot({ path: path.join(ARTIFACTS, "console-saga.png"), fullPage: true });
  });
});
