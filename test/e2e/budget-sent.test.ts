import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { commitFlow, createFlow, reserveFlow } from "../../shared/store/scripts/flow.js";
import { answersIn, flowEnd } from "../support/flow-runs.js";
import type { TestRunnerProcess } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";
import { quietSent } from "../support/quiet-sent.js";

// What the Worker sends to storage per job, counted where it leaves: at this stack's own REST
// endpoint (one EVALSHA is one command, a pipeline of n is n). Deterministic budgets, no timings:
// a lone job (a flow of one job, the commonest case for a webhook-driven system) and a batch of
// independent jobs. The trivial test runner acknowledges, then reports `started` and its result,
// one webhook each, as docs/runners.md teaches: the `started` report is counted too.

// No cron: a sweep in the middle would be counted too.
const { stack, admin } = usePrivateStack("budget-sent", { cron: false });

/**
 * Budgets (docs/cost-and-performance.md, Cost). A lone job's: what it sends besides reading the key epoch, which an
 * isolate does at most once a second however many requests it verifies (one more in all).
 */
const LONE_JOB_SENT = 3;
const INDEPENDENT_SENT_PER_JOB = 0.2;

/** The commands the REST endpoint sent, once nothing more goes out for a while. */
const quiet = (idleMs = 600) => quietSent(stack(), idleMs);

describe("budget: commands sent to storage", () => {
  let ctx: number;
  let proc: TestRunnerProcess;

  it(`runs a lone job, started reported, with at most ${LONE_JOB_SENT} commands sent, and the key epoch's read`, async () => {
    ctx = (await admin().client.createContext()).id;
    proc = await (await stack().registerTestRunner(admin().client, ctx)).start();
    // Warm up: the first flows pay for loading scripts, looking up keys, the context, the runners.
    for (let i = 0; i < 2; i++) {
      const warm = await admin().client.submitFlow(ctx, {
        start: true,
        jobs: [{ name: "w", script: "true", script_type: "sh" }],
      });
      expect((await flowEnd(admin().client, ctx, warm.id)).status).toBe("finished");
    }
    await answersIn(proc, "answered result w ", 2);

    /** The key epoch's reads so far (with the database's identity): the only MGET a lone job sends (INFO commandstats). */
    const epochReads = async () => (await stack().commandStats()).get("mget") ?? 0;
    const counts: number[] = [];
    const reads: number[] = [];
    let last = 0;
    for (let i = 0; i < 3; i++) {
      const readsBefore = await epochReads();
      const before = await quiet();
      const flow = await admin().client.submitFlow(ctx, {
        start: true,
        jobs: [{ name: `lone${i}`, script: "true", script_type: "sh" }],
      });
      await answersIn(proc, new RegExp(`^answered result lone${i} flow ${flow.id} .* 200 applied$`), 1);
      const sent = (await quiet()) - before;
      const read = (await epochReads()) - readsBefore;
      last = flow.id;
      reads.push(read);
      counts.push(sent - read);
    }
    console.log(
      `budget: a lone job sent ${counts.join(", ")} commands besides ${reads.join(", ")} key epoch read(s) (limit ${LONE_JOB_SENT} + the epoch's)`,
    );
    for (const n of counts) expect(n).toBeLessThanOrEqual(LONE_JOB_SENT);
    // What was counted included a `started` report (read after counting: a job reported only
    // by its result goes from dispatched to finished without this event).
    const types: string[] = [];
    for await (const event of admin().client.flowEvents(ctx, last, { since: 0 })) {
      types.push(event.type);
      if (event.type === "flow.finished" || event.type === "flow.error") break;
    }
    expect(types).toContain("job.started");
  });

  it("costs a lone job no more after a quiet spell of over 30 s (the runner list is kept)", async () => {
    await quiet();
    await new Promise((r) => setTimeout(r, 31_000));
    const before = await quiet();
    const record = stack().restRecord();
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "later", script: "true", script_type: "sh" }],
    });
    await answersIn(proc, new RegExp(`^answered result later flow ${flow.id} .* 200 applied$`), 1);
    const sent = (await quiet()) - before;
    console.log(`budget: a lone job after 31 s of quiet sent ${sent}: ${JSON.stringify(record().map((c) => c[0]))}`);
    // The key epoch is read again after a quiet spell: one more than the lone job's own.
    expect(sent).toBeLessThanOrEqual(LONE_JOB_SENT + 1);
  });

  it("takes one storage round trip per step of a lone job: two to submit and dispatch it, one for its result", async () => {
    const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");
    const names = new Map(
      [reserveFlow, createFlow, commitFlow].map((script) => [`EVALSHA ${sha1(script.source)}`, script.name]),
    );
    await quiet();
    const stop = stack().restRecord();
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [{ name: "steps", script: "true", script_type: "sh" }],
    });
    await answersIn(proc, new RegExp(`^answered result steps flow ${flow.id} .* 200 applied$`), 1);
    await quiet();
    const requests = stop().map((commands) => commands.map((c) => names.get(c) ?? c).join(" + "));
    console.log(`budget: a lone job's storage round trips, in order: ${requests.join(", ")}`);
    // The key epoch's reads (MGET, with the database's identity) come at most once a second,
    // whichever request they precede.
    const path = requests.filter((r) => r !== "MGET");
    // In order: the reservation (with the nonce), the creation with its start, which claims the
    // job for the runner and makes the context due for the sweep in the same script (no
    // dispatcher round, no command of its own for the sweep), the result's commit.
    expect(path).toEqual(["reserveFlow", "createFlow", "commitFlow"]);
  });

  it(`runs 100 independent jobs with at most ${INDEPENDENT_SENT_PER_JOB} commands sent per job`, async () => {
    const before = await quiet();
    const jobs = Array.from({ length: 100 }, (_, i) => ({ name: `i${i}`, script: "true", script_type: "sh" as const }));
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
    await answersIn(proc, new RegExp(`^answered result \\S+ flow ${flow.id} `), 100, 90_000);
    const sent = (await quiet()) - before;
    console.log(
      `budget: 100 independent jobs sent ${sent} commands = ${(sent / 100).toFixed(2)} per job (limit ${INDEPENDENT_SENT_PER_JOB})`,
    );
    expect((await admin().client.loadFlow(ctx, flow.id)).status).toBe("finished");
    expect(sent / 100).toBeLessThanOrEqual(INDEPENDENT_SENT_PER_JOB);
  });
});
