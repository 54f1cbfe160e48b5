import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../infra/redis-server.js";
import type { FlowView, TemplateVersion } from "../../shared/model/index.js";
import { expectOneErrorLine, newUser, register, startFlowc } from "../support/flowc.js";
import type { WatchedProcess } from "../support/process.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * Flow templates through the CLI as a user runs them: real `flowc` processes against a real
 * `wrangler dev` Worker, with the reference runner (`flowc runner start`) running the template's
 * sh and python jobs, so its inputs are seen where they end up: the scripts' environment.
 */

const tmp = mkdtempSync(path.join(tmpdir(), "flowc-templates-test-"));
let worker: TestWorker | undefined;
const owner = newUser(tmp, "owner", { profileVar: true });
let contextId = "";
let runner: WatchedProcess | undefined;

beforeAll(async () => {
  worker = await startTestWorker("cli-templates", tmp);
  await register(owner, worker.url);
  const created = await owner.run("context", "create");
  expect(created.code, created.stderr).toBe(0);
  contextId = /^context (\d+) created/.exec(created.stdout)?.[1] as string;
  const runnerKey = path.join(owner.home, "runner.json");
  expect((await owner.run("keygen", "--out", runnerKey)).code).toBe(0);
  const port = await freePort();
  const registered = await owner.run(
    "runner",
    "register",
    contextId,
    "--key-file",
    runnerKey,
    "--type",
    "python",
    "--script-types",
    "python,sh",
    "--address",
    `http://127.0.0.1:${port}/`,
  );
  expect(registered.code, registered.stderr).toBe(0);
  const runnerId = /^runner (\d+) registered/.exec(registered.stdout)?.[1] as string;
  runner = startFlowc(
    ["runner", "start", contextId, runnerId, "--key-file", runnerKey, "--listen", `127.0.0.1:${port}`],
    owner.env,
  );
  await runner.waitForLine(/listening on http:\/\/127\.0\.0\.1:\d+\//, 30_000);
});

afterAll(async () => {
  await runner?.kill();
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

const example = path.join("examples", "template.yaml");

describe("flowc template", () => {
  it("puts the example as version 1, and again as no new version", async () => {
    const put = await owner.run("template", "put", contextId, "report", example);
    expect(put.code, put.stderr).toBe(0);
    expect(put.stdout).toBe(`template report in context ${contextId} stored as version 1 (3 jobs)\n`);
    const again = await owner.run("template", "put", contextId, "report", example);
    expect(again.stdout).toBe(
      `template report in context ${contextId} unchanged: the same file as version 1, the latest (3 jobs)\n`,
    );

    const list = await owner.run("template", "list", contextId);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^NAME\s+LATEST\s+KEPT\s+UPDATED\s+DESCRIPTION$/m);
    expect(list.stdout).toMatch(/^report\s+1\s+1\s+\S+Z\s+a report for one region over the last days$/m);

    const show = await owner.run("template", "show", contextId, "report");
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/^template\s+report version 1 \(latest\)$/m);
    expect(show.stdout).toMatch(/^region\s+string\s+"eu"\s+no\s+the region the report is for$/m);
    expect(show.stdout).toMatch(/^days\s+number\s+7\s+no\s+how many days back$/m);
    const json = await owner.run("template", "show", contextId, "report", "--version", "1", "--json");
    expect((JSON.parse(json.stdout) as TemplateVersion).file.inputs).toMatchObject({ publish: { type: "boolean" } });
  });

  it("starts it with inputs typed as declared: the scripts see them, the when reads them", async () => {
    const run = await owner.run(
      "template",
      "start",
      contextId,
      "report",
      "--input",
      "region=us",
      "--input",
      "days=3",
      "--input",
      "publish=true",
      "--watch",
    );
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const flowId = new RegExp(
      `^flow (\\d+) started from template report version 1 in context ${contextId} \\(3 jobs: fetch, summarize, publish\\)$`,
      "m",
    ).exec(run.stdout)?.[1];
    expect(Number(flowId)).toBeGreaterThan(0);
    expect(run.stdout).toMatch(/✓ fetch finished {2}rows=30, region=us$/m);
    expect(run.stdout).toMatch(/✓ summarize finished {2}summary=report for us: 30 rows$/m);
    expect(run.stdout).toMatch(/✓ publish finished {2}published=report for us: 30 rows$/m);

    const show = await owner.run("flow", "show", contextId, flowId as string);
    expect(show.stdout).toMatch(/^template\s+report version 1$/m);
    // Named after its template, and listed with it as its trigger.
    expect(show.stdout).toMatch(/^name\s+report$/m);
    expect(show.stdout).toMatch(/^trigger\s+template report v1$/m);
    const listed = await owner.run("flow", "list", contextId, "--name", "report");
    expect(listed.stdout).toMatch(
      new RegExp(`^${flowId}\\s+report\\s+finished\\s+template report v1\\s+0\\s+3/3\\s`, "m"),
    );
    expect(show.stdout).toMatch(/^env_vars\s+TITLE=report for us, INPUT_REGION=us, INPUT_DAYS=3, INPUT_PUBLISH=true$/m);

    // The defaults: eu, 7 days, not published (the when is false).
    const plain = await owner.run("template", "start", contextId, "report", "--watch", "--json");
    expect(plain.code, plain.stderr).toBe(0);
    const view = JSON.parse(plain.stdout) as FlowView;
    expect(view.result).toEqual({
      fetch: { rows: "70", region: "eu" },
      summarize: { summary: "report for eu: 70 rows" },
    });
    expect(view.jobs.find((j) => j.name === "publish")?.status).toBe("skipped");
  });

  it("runs a template whose jobs are child flows: each report a flow of its own, linked both ways, then their total", async () => {
    const regions = path.join("examples", "template-regions.yaml");
    expect((await owner.run("template", "put", contextId, "regions", regions)).code).toBe(0);
    const run = await owner.run("template", "start", contextId, "regions", "--watch", "--json");
    expect(run.code, run.stdout + run.stderr).toBe(0);
    const view = JSON.parse(run.stdout) as FlowView;
    expect(view.status).toBe("finished");
    // Each child's result comes back as <job>.<key>; the total reads them from its dependencies.
    expect(view.result?.total).toMatchObject({ rows: "80" });
    for (const name of ["us", "eu"]) {
      const job = view.jobs.find((j) => j.name === name);
      const childId = job?.child_flow_id as number;
      expect(childId, name).toBeGreaterThan(0);
      const child = JSON.parse(
        (await owner.run("flow", "show", contextId, String(childId), "--json")).stdout,
      ) as FlowView;
      expect([child.status, child.parent?.flow_id, child.parent?.job_id]).toEqual(["finished", view.id, job?.id]);
      // In words: the child's `flow show` names its parent and the job; the parent's shows and
      // draws the job as that child flow.
      const childText = await owner.run("flow", "show", contextId, String(childId));
      expect(childText.stdout).toMatch(new RegExp(`^parent\\s+flow ${view.id} \\(job ${job?.id}\\)$`, "m"));
      expect(childText.stdout).toMatch(new RegExp(`^trigger\\s+parent flow ${view.id}$`, "m"));
      const shown = await owner.run("flow", "show", contextId, String(view.id));
      expect(shown.stdout).toMatch(new RegExp(`^${name}\\s+${job?.id}\\s+⇣ flow ${childId}\\s+✓ finished`, "m"));
      expect(shown.stdout).not.toMatch(/^parent/m);
      const dag = await owner.run("flow", "dag", contextId, String(view.id));
      expect(dag.stdout).toMatch(new RegExp(`^(?: 1|  )  ✓ ${name}\\s+⇣ flow ${childId}\\s+finished$`, "m"));
    }
  });

  it("refuses an input of the wrong type before asking, and one the template does not declare, naming it", async () => {
    expectOneErrorLine(
      await owner.run("template", "start", contextId, "report", "--input", "days=many"),
      2,
      /--input days must be a number, not "many"/,
    );
    expectOneErrorLine(
      await owner.run("template", "start", contextId, "report", "--input", "colour=red"),
      1,
      /body\.inputs\.colour: the template declares no input colour \(it declares region, days, publish\)/,
    );
    const undeclared = path.join(owner.home, "undeclared.yaml");
    writeFileSync(undeclared, 'jobs:\n  - name: a\n    wait: { event: e, key: "${inputs.who}" }\n');
    expectOneErrorLine(
      await owner.run("template", "put", contextId, "other", undeclared),
      1,
      new RegExp(`^flowc: ${undeclared}:3: jobs\\.0\\.wait\\.key \\(job "a"\\): names the input who`),
    );
  });

  it("schedules it: each fire starts the template with the schedule's inputs", async () => {
    const created = await owner.run(
      "schedule",
      "create",
      contextId,
      "--template",
      "report",
      "--input",
      "region=asia",
      "--every",
      "1h",
    );
    expect(created.code, created.stderr).toBe(0);
    const scheduleId = /^schedule (\d+) created/.exec(created.stdout)?.[1] as string;
    const show = await owner.run("schedule", "show", contextId, scheduleId);
    expect(show.stdout).toMatch(/^template\s+report \(latest at each fire\) region="asia"$/m);
    const fired = await owner.run("schedule", "trigger", contextId, scheduleId);
    expect(fired.code, fired.stderr).toBe(0);
    const flowId = new RegExp(`^schedule ${scheduleId}: started flow (\\d+)$`).exec(fired.stdout.trim())?.[1];
    const watched = await owner.run("flow", "watch", contextId, flowId as string, "--json");
    expect(watched.code, watched.stderr).toBe(0);
    const view = JSON.parse(watched.stdout) as FlowView;
    expect([view.template, view.result.fetch]).toEqual([
      { name: "report", version: 1 },
      { rows: "70", region: "asia" },
    ]);
    expect([view.name, view.schedule_id]).toEqual(["report", Number(scheduleId)]);
    const listed = await owner.run("flow", "list", contextId, "--newest", "--limit", "1");
    expect(listed.stdout).toMatch(new RegExp(`^${flowId}\\s+report\\s+finished\\s+schedule ${scheduleId}\\s`, "m"));
    expect((await owner.run("schedule", "delete", contextId, scheduleId)).code).toBe(0);

    expectOneErrorLine(
      await owner.run("schedule", "create", contextId, example, "--template", "report", "--every", "1h"),
      2,
      /give either a <file> or --template/,
    );
  });

  it("deletes it", async () => {
    const removed = await owner.run("template", "delete", contextId, "report");
    expect(removed.stdout).toBe("template report deleted\n");
    expectOneErrorLine(await owner.run("template", "show", contextId, "report"), 1, /does not exist/);
  });
});
