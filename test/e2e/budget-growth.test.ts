import { describe, expect, it } from "vitest";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import { flowEnd } from "../support/flow-runs.js";
import { commandDelta } from "../support/private-stack.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// What growth costs, counted two ways on a quiet stack: the commands the Worker sends (at this
// stack's REST endpoint: a script call is one) and the commands Redis runs (INFO commandstats: a
// script call and each command inside it). A map of 100 items is compared with the same flow
// written out by hand (100 jobs depending on the list), and a job that adds 100 jobs with a flow
// that had them from the start: the difference, per instance or per added job, is what growth
// costs (docs/cost-and-performance.md, "Growth"). A plain flow's budgets are budget-sent's and
// budget-events', which this leaves alone.

// No cron: a sweep in the middle would be counted too.
const { stack, admin } = usePrivateStack("budget-growth", { cron: false });

/**
 * Budgets. Commands run per mapped instance and per added job, over the same job in a flow that
 * had it from the start (measured 0.04 to 0.17: the same writes, in a commit instead of the
 * creation, and the growth's own few). Commands sent per job of the whole flow: commits write
 * many transitions at once, so what is sent depends on how reports meet in batches more than on
 * growth (measured 0.27 to 0.31; growing itself sends 2 commands for a map, its ids' HINCRBYs in
 * one round trip, and 3 for added jobs, the context's read too).
 */
const RUN_PER_GROWN_JOB = 0.5;
const SENT_PER_JOB = 0.5;

const N = 100;
const sh = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  script: "true",
  script_type: "sh" as const,
  ...extra,
});
const items = JSON.stringify(Array.from({ length: N }, (_, i) => `item-${i}`));

/** The commands the Worker sent and Redis ran for a flow, from its submission to its end, once all went quiet. */
async function costOf(ctx: number, body: FlowSubmissionInput) {
  await stack().quietCommandStats();
  const sentBefore = stack().restSent().commands;
  const before = await stack().quietCommandStats();
  const flow = await admin().client.submitFlow(ctx, { start: true, ...body });
  const view = await flowEnd(admin().client, ctx, flow.id, 120_000);
  expect(view.status).toBe("finished");
  const delta = commandDelta(before, await stack().quietCommandStats());
  const sent = stack().restSent().commands - sentBefore;
  // The key epoch's read (MGET) comes at most once a second whatever the work: left out.
  const epoch = delta.byCommand.mget ?? 0;
  return { sent: sent - epoch, run: delta.total - epoch, jobs: view.jobs.length, byCommand: delta.byCommand };
}

describe("budget: flows that grow", () => {
  let ctx: number;

  it(`a mapped instance costs at most ${RUN_PER_GROWN_JOB} commands run more than a job written out, ${SENT_PER_JOB} sent per job`, async () => {
    ctx = (await admin().client.createContext()).id;
    await (await stack().registerTestRunner(admin().client, ctx)).start();
    const list = sh("list", { env_vars: { ADD_RESULT: JSON.stringify({ files: items }) } });
    // Warm up: scripts loaded, the context and the runners known.
    await costOf(ctx, { jobs: [list, sh("m", { depends: ["list"], map: { over: "list.files" } })] });
    const byHand = await costOf(ctx, {
      jobs: [
        list,
        ...Array.from({ length: N }, (_, i) => sh(`p${i}`, { depends: ["list"] })),
        sh("summarize", { depends: Array.from({ length: N }, (_, i) => `p${i}`) }),
      ],
    });
    const mapped = await costOf(ctx, {
      jobs: [
        list,
        sh("process", { depends: ["list"], map: { over: "list.files" } }),
        sh("summarize", { depends: ["process"] }),
      ],
    });
    expect(mapped.jobs).toBe(N + 3);
    const sent = (mapped.sent - byHand.sent) / N;
    const run = (mapped.run - byHand.run) / N;
    console.log(
      `budget: a map of ${N} (${mapped.jobs} jobs: ${(mapped.sent / mapped.jobs).toFixed(2)} sent, ${(mapped.run / mapped.jobs).toFixed(2)} run per job): ${mapped.sent} sent, ${mapped.run} run; written out: ${byHand.sent} sent, ${byHand.run} run; per instance ${sent.toFixed(2)} sent, ${run.toFixed(2)} run more (map ${JSON.stringify(mapped.byCommand)}, by hand ${JSON.stringify(byHand.byCommand)})`,
    );
    expect(mapped.sent / mapped.jobs).toBeLessThanOrEqual(SENT_PER_JOB);
    expect(run).toBeLessThanOrEqual(RUN_PER_GROWN_JOB);
  });

  it(`an added job costs at most ${RUN_PER_GROWN_JOB} commands run more than a job submitted, ${SENT_PER_JOB} sent per job`, async () => {
    const added = Array.from({ length: N }, (_, i) => sh(`a${i}`, { depends: ["seed"] }));
    const submitted = await costOf(ctx, { jobs: [sh("seed"), ...added] });
    const grown = await costOf(ctx, { jobs: [sh("seed", { env_vars: { ADD_JOBS: JSON.stringify(added) } })] });
    expect(grown.jobs).toBe(N + 1);
    const sent = (grown.sent - submitted.sent) / N;
    const run = (grown.run - submitted.run) / N;
    console.log(
      `budget: ${N} added jobs (${grown.jobs} jobs: ${(grown.sent / grown.jobs).toFixed(2)} sent, ${(grown.run / grown.jobs).toFixed(2)} run per job): ${grown.sent} sent, ${grown.run} run; submitted: ${submitted.sent} sent, ${submitted.run} run; per added job ${sent.toFixed(2)} sent, ${run.toFixed(2)} run more (grown ${JSON.stringify(grown.byCommand)}, submitted ${JSON.stringify(submitted.byCommand)})`,
    );
    expect(grown.sent / grown.jobs).toBeLessThanOrEqual(SENT_PER_JOB);
    expect(run).toBeLessThanOrEqual(RUN_PER_GROWN_JOB);
  });
});
