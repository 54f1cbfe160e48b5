import { writeFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import type { ConsoleMessage, Locator, Request, Response } from "playwright-core";
import { freePort } from "../../infra/redis-server.js";
import { bareKeyId, generateKeyPair, type PrivateJwk } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk } from "../../shared/client/index.js";
import { ARTIFACTS } from "../support/browser.js";
import { eventually } from "../support/eventually.js";
import { actorEnv, startFlowc } from "../support/flowc.js";
import { scalarWarnings } from "../support/scalar.js";
import { useConsoleBrowser } from "../support/console-browser.js";

// The console's context pages beyond flows, in a real browser (Debian's chromium driven by
// playwright-core) against one stack of this file's own (one wrangler start for them all):
// templates (a context's templates with their versions, one template's versions and inputs, the
// flow page naming the template a flow came from), schedules (the cron in words, the next fires,
// recent runs linked to their flows, pause / resume / trigger), a runner's registered concurrency
// on the runners page, sign-in with a key that is nobody's or a runner's, and the API reference.

const { stack, admin, keyFile, tmp, browser } = useConsoleBrowser("console-pages", { cron: false });

/** Signs the browser in to the console with the admin's key file, as a person does. */
async function signIn(): Promise<void> {
  const { page } = browser();
  await page.goto(`${stack().url}/console`);
  const signOut = page.getByRole("button", { name: "Sign out" });
  await page.getByRole("heading", { name: "Sign in" }).or(signOut).waitFor();
  if (await signOut.isVisible()) return;
  await page.locator("#key-file").setInputFiles(keyFile);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Contexts" }).waitFor();
}

const nap = (description: string) => ({
  description,
  inputs: { who: { type: "string" as const, default: "world", description: "whom to greet" } },
  env_vars: { WHO: "${inputs.who}" },
  jobs: [{ name: "nap", sleep: 3600 }],
});

describe("the console shows templates", () => {
  it("lists a context's templates, a template's versions and inputs, and where a flow came from", async () => {
    const { page, errors } = browser();
    const { client, id: actorId } = admin();
    const ctx = (await client.createContext()).id;
    await client.templates.put(ctx, "nap", nap("a nap"));
    await client.templates.put(ctx, "nap", nap("a longer nap"));
    await client.templates.put(ctx, "other", { jobs: [{ name: "x", sleep: 1 }] });
    const flow = await client.templates.start(ctx, "nap", { version: 1, inputs: { who: "you" } });

    await signIn();
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
    const { page, errors } = browser();
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
    await signIn();

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

describe("the console's runners page", () => {
  it("shows the load against the concurrency the runner is registered with, which flowc runner start runs it with", async () => {
    const { page, errors } = browser();
    const { client } = admin();
    const ctx = (await client.createContext()).id;
    const jwk = await generateKeyPair();
    const port = await freePort();
    const registered = await client.createRunner(ctx, {
      pubkey: jwk.x,
      runner_type: "sh",
      script_types: ["sh"],
      concurrency: 4,
      address: `http://127.0.0.1:${port}/`,
    });
    const runnerKey = path.join(tmp, "runner-key.json");
    writeFileSync(runnerKey, JSON.stringify(jwk), { mode: 0o600 });
    // Started as the README says, without --concurrency: it takes the registered one.
    const runner = startFlowc(
      ["runner", "start", String(ctx), String(registered.id), "--key-file", runnerKey, "--listen", `127.0.0.1:${port}`],
      actorEnv(stack(), admin()),
    );
    try {
      await runner.waitForLine(/listening on http:\/\/127\.0\.0\.1:\d+\/ \(concurrency 4, /, 30_000);
      const gate = path.join(tmp, "runners-gate");
      const held = (name: string) => ({
        name,
        script_type: "sh" as const,
        env_vars: { GATE: gate },
        script: 'while [ ! -e "$GATE" ]; do sleep 0.1; done\necho "done=1" > "$RESULT_FILE"\n',
      });
      const flow = await client.submitFlow(ctx, { start: true, jobs: [held("a"), held("b"), held("c")] });

      await signIn();
      await page.goto(`${stack().url}/console/#/contexts/${ctx}/runners`);
      const row = page.locator(`tr[data-runner="${registered.id}"]`);
      // Three jobs at once on a runner of four (the page reads again every 5 s).
      await row.locator(".load", { hasText: "3 / 4" }).waitFor();
      await expect(
        row.locator("meter").evaluate((m) => [(m as HTMLMeterElement).value, (m as HTMLMeterElement).max]),
      ).resolves.toEqual([3, 4]);
      await page.screenshot({ path: path.join(ARTIFACTS, "console-runner-load.png") });
      writeFileSync(gate, "");
      await eventually(
        async () => ((await client.loadFlow(ctx, flow.id)).status === "finished" ? true : undefined),
        30_000,
      );
      await row.locator(".load", { hasText: "0 / 4" }).waitFor();
    } finally {
      await runner.kill();
    }
    expect(errors).toEqual([]);
  });
});

describe("sign-in with a key that is no actor's", () => {
  /** Signs out if signed in, and picks `file` on the sign-in form. */
  async function chooseKey(file: string): Promise<void> {
    const { page } = browser();
    await page.goto(`${stack().url}/console/`);
    const signOut = page.getByRole("button", { name: "Sign out" });
    await page.getByRole("heading", { name: "Sign in" }).or(signOut).waitFor();
    if (await signOut.isVisible()) await signOut.click();
    await page.locator("#key-file").setInputFiles(file);
    await page.getByRole("button", { name: "Sign in" }).click();
  }

  it("refuses a runner's key, naming the runner, and asks before registering a key nobody has", async () => {
    const { page, errors, sent } = browser();
    const { client } = admin();
    const ctx = (await client.createContext()).id;
    const runnerJwk = await generateKeyPair();
    const runner = await client.createRunner(ctx, { pubkey: runnerJwk.x, runner_type: "sh", local: true });
    const runnerFile = path.join(tmp, "a-runner-key.json");
    writeFileSync(runnerFile, JSON.stringify(runnerJwk), { mode: 0o600 });
    const registrations = () => sent.filter((r) => r.method === "POST" && new URL(r.url).pathname === "/v1/actors");
    const before = registrations().length;

    // A runner's key: refused, named, nothing registered.
    await chooseKey(runnerFile);
    await page
      .getByRole("alert")
      .getByText(`This is the key of runner ${runner.id} of context ${ctx}, not an actor's.`)
      .waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-signin-runner-key.png") });
    expect(registrations().length).toBe(before);
    const anonymous = new CoordinatorClient({ baseUrl: stack().url });
    const whoIs = async (jwk: PrivateJwk) => anonymous.as(await signerFromJwk(jwk, bareKeyId(jwk.x))).whoAmI();
    expect((await whoIs(runnerJwk)).actor_id).toBeUndefined();

    // A key nobody has: the page asks first; Cancel registers nothing.
    const fresh = await generateKeyPair();
    const freshFile = path.join(tmp, "fresh-key.json");
    writeFileSync(freshFile, JSON.stringify(fresh), { mode: 0o600 });
    await page.locator("#key-file").setInputFiles(freshFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    const question = page.getByRole("alertdialog");
    await question.getByText("This key is not registered").waitFor();
    await page.screenshot({ path: path.join(ARTIFACTS, "console-signin-ask.png") });
    await question.getByRole("button", { name: "Cancel" }).click();
    await page.getByRole("button", { name: "Sign in" }).waitFor();
    expect(registrations().length).toBe(before);
    expect((await whoIs(fresh)).actor_id).toBeUndefined();
    // Asked again, and this time registered: signed in as the new actor.
    await page.locator("#key-file").setInputFiles(freshFile);
    await page.getByRole("button", { name: "Sign in" }).click();
    await question.getByRole("button", { name: "Register as a new actor" }).click();
    await page.getByRole("heading", { name: "Contexts" }).waitFor();
    const made = (await whoIs(fresh)).actor_id as number;
    expect(made).toBeGreaterThan(admin().id);
    await page
      .getByTestId("actor")
      .filter({ hasText: `actor ${made}` })
      .waitFor();
    expect(registrations().length).toBe(before + 1);

    // Signed out, the API reference says plainly that Test Request cannot sign.
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.getByRole("heading", { name: "Sign in" }).waitFor();
    await page.goto(`${stack().url}/docs/`);
    await page.getByText("Test Request cannot sign: sign in to").waitFor();
    expect(errors).toEqual([]);
  });
});

describe("the API reference at /docs/", () => {
  it("loads /openapi.json without a validation warning, opens on the introduction, and signs Test Request with the console's key", async () => {
    const { page, errors } = browser();
    // The served document through Scalar's own pipeline in Node first: it names the schema at fault.
    const served = (await (await fetch(`${stack().url}/openapi.json`)).json()) as object;
    expect(await scalarWarnings(served)).toEqual([]);

    await signIn();
    const warnings: string[] = [];
    const listen = (message: ConsoleMessage) => {
      if (message.type() === "warning" || message.type() === "error") warnings.push(message.text());
    };
    page.on("console", listen);
    try {
      await page.goto(`${stack().url}/docs/`);
      await page.getByRole("heading", { name: "Flow coordinator" }).waitFor();
      // The introduction comes first, the problems after it.
      const intro = page.getByText("Flows — DAGs of jobs — are submitted into", { exact: false }).first();
      await intro.waitFor();
      await page.getByRole("heading", { name: "Signing requests" }).first().waitFor();
      const top = async (locator: Locator) => (await locator.boundingBox())?.y ?? Number.POSITIVE_INFINITY;
      const problems = page.getByRole("heading", { name: "Problems", exact: true }).first();
      expect(await top(intro)).toBeLessThan(await top(problems));
      // The banner: Test Request signs as the actor signed in to the console in this browser().
      await page.getByText(`Test Request signs as actor ${admin().id}`).waitFor();
      await page.screenshot({ path: path.join(ARTIFACTS, "console-docs-intro.png") });
      // Scalar checked the document as it loaded it: nothing to warn about.
      expect(warnings.filter((w) => /union value|validation/i.test(w))).toEqual([]);

      // Test Request of GET /v1/contexts: sent signed, answered 200, the answer shown.
      // Under load Scalar's page can take a press of Test Request, or of Send, before it is ready
      // and drop it (CI saw both): each try opens the operation afresh, presses Test Request once
      // it is shown, and Send once the client shows it; a client that did not open is tried again.
      let response: Response | undefined;
      // What went wrong in each try that sent nothing, for the error: a request the page made to
      // /v1/contexts that failed (it has no response), or none made at all.
      const failed: string[] = [];
      const onFailed = (request: Request) => {
        if (new URL(request.url()).pathname === "/v1/contexts")
          failed.push(`${request.method()} ${request.url()}: ${request.failure()?.errorText ?? "failed"}`);
      };
      page.on("requestfailed", onFailed);
      for (let attempt = 0; attempt < 4 && !response; attempt++) {
        // A reload, not the same address again: a hash change would keep a client left open.
        if (attempt === 0) await page.goto(`${stack().url}/docs/#tag/contexts/GET/v1/contexts`);
        else await page.reload();
        // The operation's own button: the page renders the operations before it too, each with
        // one (Scalar names them "Test Request(get /health)" and so on), and the first of them
        // opened GET /health, whose answer this waited for in vain (both of one day's CI runs).
        const test = page.getByRole("button", { name: /^Test Request\s*\(get \/v1\/contexts\)$/ });
        await test.waitFor({ state: "visible", timeout: 15_000 });
        await test.click();
        const send = page.getByRole("button", { name: /^Send/ }).first();
        const shown = await send.waitFor({ state: "visible", timeout: 20_000 }).then(
          () => true,
          () => false,
        );
        if (!shown) {
          await page.screenshot({ path: path.join(ARTIFACTS, `console-docs-try-${attempt}.png`) });
          continue;
        }
        const answered = page
          .waitForResponse((r) => new URL(r.url()).pathname === "/v1/contexts", { timeout: 10_000 })
          .catch(() => undefined);
        await send.click();
        response = await answered;
        if (!response) await page.screenshot({ path: path.join(ARTIFACTS, `console-docs-sent-${attempt}.png`) });
      }
      page.off("requestfailed", onFailed);
      if (!response)
        throw new Error(`Test Request sent nothing: ${failed.join("; ") || "no request to /v1/contexts was made"}`);
      expect(response.status()).toBe(200);
      expect(await response.request().headerValue("signature-input")).toContain(`keyid="actor:${admin().id}"`);
      await page.getByText("200 OK").first().waitFor();
      await page.screenshot({ path: path.join(ARTIFACTS, "console-docs-try.png") });
    } finally {
      page.off("console", listen);
    }
    expect(warnings.filter((w) => /union value|validation/i.test(w))).toEqual([]);
    expect(errors).toEqual([]);
  });
});
