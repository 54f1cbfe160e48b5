import { describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { eventually } from "../support/eventually.js";
import { attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// A push runner that answers a delivery with how the attempt ended (`{ "report": {...} }`,
// signed by it as the answer to that POST) instead of acknowledging it and reporting through the
// result webhook: the test runner's INLINE=1, on a real Worker, Redis and runner process. The
// coordinator records the delivery and the attempt's end in one group commit; a duplicate
// delivery answered with the same report again changes nothing; an answer the runner's key did
// not sign ends nothing and counts as a refusal.

const { stack, admin, submit, slotsHeld } = usePrivateStack("answer-report", { cron: false });

const jobs = (n: number, prefix = "j") =>
  Array.from({ length: n }, (_, i) => ({ name: `${prefix}${i}`, script: "true", script_type: "sh" as const }));

/** Result webhooks this Worker answered (its isolate's counters): none should come from INLINE runners. */
async function resultWebhooks(): Promise<number> {
  const text = await (await fetch(`${stack().url}/metrics`)).text();
  let sum = 0;
  for (const m of text.matchAll(
    /^coordinator_isolate_http_requests_total\{method="POST",route="[^"]*\/(result|reports)",[^}]*\} (\d+)$/gm,
  ))
    sum += Number(m[2]);
  return sum;
}

describe("results in the answer to a delivery", () => {
  it("ends a lone job and a 60-job flow pushed 10 a POST, each job once, without a result webhook", async () => {
    const ctx = (await admin().client.createContext()).id;
    const registered = await stack().registerTestRunner(
      admin().client,
      ctx,
      { INLINE: "1", DELIVERIES_PER_POST: "10", FAIL: "j7" },
      20,
    );
    const proc = await registered.start();
    const webhooksBefore = await resultWebhooks();

    const lone = await submit(ctx, { jobs: [{ name: "lone", script: "true", script_type: "sh" }] });
    const loneEnd = await flowEnd(admin().client, ctx, lone.id);
    expect(loneEnd.status).toBe("finished");
    expect(loneEnd.jobs[0]).toMatchObject({ status: "finished", attempt: 1, result: { job: "lone", attempt: "1" } });

    // j7 fails each time (FAIL): its error comes in the answer too, and is retried once.
    const flow = await submit(ctx, {
      jobs: jobs(60).map((j) => (j.name === "j7" ? { ...j, retries: 1 } : j)),
      timeouts: { retry_base_ms: 10, retry_cap_ms: 10 },
    });
    const ended = await flowEnd(admin().client, ctx, flow.id, 60_000);
    expect(ended.status).toBe("error");
    const byName = new Map(ended.jobs.map((j) => [j.name, j]));
    expect(byName.get("j7")).toMatchObject({ status: "error", attempt: 2 });
    expect(byName.get("j7")?.error).toMatch(/job j7 failed on purpose/);
    for (const [name, job] of byName) {
      if (name === "j7") continue;
      expect(job).toMatchObject({ status: "finished", attempt: 1, result: { job: name, attempt: "1" } });
    }
    const attempts = attemptsOf(runsIn(proc.output()), flow.id);
    expect(Object.keys(attempts)).toHaveLength(60);
    for (const [name, tries] of Object.entries(attempts)) expect(tries).toEqual(name === "j7" ? [1, 2] : [1]);
    expect(proc.output()).toMatch(/^batch of 10$/m);
    expect(await resultWebhooks()).toBe(webhooksBefore);
    expect(await slotsHeld(ctx, registered.id)).toBe(0);
    await proc.kill();
  });

  it("refuses an answer not signed with the runner's registered key, and ends nothing by it", async () => {
    const ctx = (await admin().client.createContext()).id;
    const registered = await stack().registerTestRunner(admin().client, ctx, { INLINE: "1" }, 5);
    const proc = await registered.start();
    // The registration now names another key: the runner still signs with its old one.
    await admin().client.updateRunner(ctx, registered.id, { pubkey: (await generateKeyPair()).x });
    const flow = await submit(ctx, { jobs: [{ name: "unsigned", script: "true", script_type: "sh" }] });
    const runner = await eventually(
      async () => {
        const seen = await admin().client.loadRunner(ctx, registered.id);
        return seen.dispatch.last_error ? seen : undefined;
      },
      20_000,
      100,
      "a refusal recorded at the runner",
    );
    expect(runner.dispatch.last_error).toMatch(/with a report not signed by the runner \(signature-invalid: /);
    const view = await admin().client.loadFlow(ctx, flow.id);
    expect(view.jobs[0]?.status).not.toBe("finished");
    expect(await slotsHeld(ctx, registered.id)).toBe(0);
    await proc.kill();
  });
});
