import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../infra/redis-server.js";
import { actorKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk, type JobWithStatus } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import { expectOneErrorLine, newUser, register, startFlowc } from "../support/flowc.js";
import type { WatchedProcess } from "../support/process.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * `flowc job cancel` and `flowc job rerun` on jobs outside any flow, and `flowc flow rerun
 * --from` of a flow that finished, run by the reference runner (`flowc runner start`), against a
 * real `wrangler dev` Worker; and `flowc runner register` of a key another runner of the context
 * holds.
 */

const tmp = mkdtempSync(path.join(tmpdir(), "flowc-jobs-test-"));
let worker: TestWorker | undefined;
const owner = newUser(tmp, "owner");
let context = "";
let caller = "";
let runnerKey = "";
let runnerId = "";
let runner: WatchedProcess | undefined;
/** The API, signed as the owner: jobs outside flows have no submit command of their own. */
let api: CoordinatorClient;

beforeAll(async () => {
  worker = await startTestWorker("cli-jobs", tmp);
  caller = String(await register(owner, worker.url));
  const jwk = JSON.parse(readFileSync(path.join(owner.home, "key.json"), "utf8")) as PrivateJwk;
  api = new CoordinatorClient({ baseUrl: worker.url, signer: await signerFromJwk(jwk, actorKeyId(Number(caller))) });
  context = /^context (\d+) created/.exec((await owner.run("context", "create")).stdout)?.[1] as string;
  runnerKey = path.join(owner.home, "runner.json");
  expect((await owner.run("keygen", "--out", runnerKey)).code).toBe(0);
  const port = String(await freePort());
  const address = `http://127.0.0.1:${port}/`;
  const reg = await owner.run(
    "runner",
    "register",
    context,
    "--key-file",
    runnerKey,
    "--type",
    "sh",
    "--address",
    address,
  );
  expect(reg.code, reg.stderr).toBe(0);
  runnerId = /^runner (\d+) registered/.exec(reg.stdout)?.[1] as string;
  const work = path.join(tmp, "work");
  runner = startFlowc(
    [
      "runner",
      "start",
      context,
      runnerId,
      "--key-file",
      runnerKey,
      "--listen",
      `127.0.0.1:${port}`,
      "--work-dir",
      work,
    ],
    owner.env,
  );
  await runner.waitForLine(/listening on http:\/\/127\.0\.0\.1:\d+\//, 30_000);
}, 120_000);

afterAll(async () => {
  await runner?.kill();
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** Submits a started job outside any flow; answers its id. */
async function submit(name: string, script: string): Promise<string> {
  const answer = (await api.request("POST", `/v1/contexts/${context}/jobs`, {
    job: { name, script, script_type: "sh" },
    start: true,
  })) as { job: JobWithStatus };
  return String(answer.job.id);
}

/** Waits until the job's live status (or final one) is `status`. */
function until(job: string, status: string): Promise<JobWithStatus> {
  return eventually(
    async () => {
      const j = (await api.request("GET", `/v1/contexts/${context}/jobs/${caller}/${job}`)) as JobWithStatus;
      return (j.live?.status ?? j.status) === status ? j : undefined;
    },
    30_000,
    100,
    `job ${job} ${status}`,
  );
}

describe("flowc job", () => {
  it("cancels a running job (its runner stops it), then refuses to cancel it again", async () => {
    const job = await submit("sleeper", "sleep 30");
    await until(job, "started");
    const cancelled = await owner.run("job", "cancel", context, caller, job, "--reason", "enough");
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.stdout.trim()).toBe(`job ${job} cancelled: enough`);
    // Stopped at its runner: by the cancel sent to it, or, should that one POST not get through
    // (CI once saw it arrive 20 s late on a loaded machine), at its next heartbeat, which the
    // coordinator refuses as stale: the runner then abandons the job.
    await runner?.waitForLine(/\(sleeper, flow 0, attempt 1, sh\) (end: error|abandoned after)/, 40_000);
    const again = await owner.run("job", "cancel", context, caller, job);
    expectOneErrorLine(again, 1, /^flowc: 409 .*already ended \(error\): nothing is left to cancel/);
    expectOneErrorLine(
      await owner.run("job", "cancel", context, "me", job),
      2,
      /<caller> must be a positive integer id/,
    );
  });

  it("re-runs a failed job with fresh retries, and refuses to re-run one that finished", async () => {
    const marker = path.join(tmp, "second-time");
    const job = await submit("twice", `[ -e ${marker} ] || { touch ${marker}; exit 4; }`);
    expect((await until(job, "error")).error).toBe("exit code 4");
    const rerun = await owner.run("job", "rerun", context, caller, job);
    expect(rerun.code, rerun.stderr).toBe(0);
    expect(rerun.stdout.trim()).toMatch(new RegExp(`^job ${job} \\w+ again \\(attempt 2\\)$`));
    await until(job, "finished");
    expectOneErrorLine(await owner.run("job", "rerun", context, caller, job), 1, /^flowc: 409 .*is finished/);
    const json = await owner.run("job", "cancel", context, caller, job, "--json");
    expect(json.code).toBe(1);
  });
});

describe("flowc flow rerun --from", () => {
  it("re-runs a finished flow from a job with a changed input, and a repeat of it is refused", async () => {
    const file = path.join(tmp, "inputs.json");
    const tell = 'echo "n=$INPUT_N" > "$RESULT_FILE"';
    const jobs = [
      { name: "a", script_type: "sh", script: tell },
      { name: "b", script_type: "sh", depends: ["a"], script: `${tell}; echo "a=$DEP_A_N" >> "$RESULT_FILE"` },
    ];
    writeFileSync(file, JSON.stringify({ env_vars: { INPUT_N: "1" }, jobs }));
    const submitted = await owner.run("flow", "submit", context, file, "--start", "--watch");
    expect(submitted.code, submitted.stderr).toBe(0);
    const flowId = /^flow (\d+) submitted/m.exec(submitted.stdout)?.[1] as string;

    const rerun = await owner.run("flow", "rerun", context, flowId, "--from", "b", "--env", "INPUT_N=2", "--watch");
    expect(rerun.code, rerun.stderr).toBe(0);
    expect(rerun.stdout).toMatch(new RegExp(`^flow ${flowId} running again, run 2 from b: b$`, "m"));
    const shown = await owner.run("flow", "show", context, flowId, "--json");
    const view = JSON.parse(shown.stdout) as FlowView;
    expect([view.status, view.run, view.env_vars]).toEqual(["finished", 2, { INPUT_N: "2" }]);
    expect(view.result).toEqual({ a: { n: "1" }, b: { n: "2", a: "1" } });
    expect((await owner.run("flow", "show", context, flowId)).stdout).toMatch(/^run\s+2 \(re-run 1 time\)$/m);

    // The same re-run again, as the run it replaced: refused, and the flow does not run again.
    expectOneErrorLine(
      await owner.run("flow", "rerun", context, flowId, "--from", "b", "--run", "1"),
      1,
      new RegExp(`^flowc: 409 .*flow ${flowId} is at run 2, not 1: it was re-run since`),
    );
    expectOneErrorLine(await owner.run("flow", "rerun", context, flowId, "--env", "N"), 2, /--env takes key=value/);
    expectOneErrorLine(
      await owner.run("flow", "rerun", context, flowId, "--from", "nope"),
      1,
      new RegExp(`^flowc: 400 .*flow ${flowId} has no job named "nope"`),
    );
    expect(JSON.parse((await owner.run("flow", "show", context, flowId, "--json")).stdout)).toMatchObject({ run: 2 });
  });
});

describe("flowc runner register", () => {
  it("refuses to register a second runner with a key another runner holds, naming it", async () => {
    const again = await owner.run("runner", "register", context, "--key-file", runnerKey, "--type", "sh", "--local");
    expectOneErrorLine(again, 1, new RegExp(`^flowc: 409 .*already runner ${runnerId}'s in context ${context}`));
  });
});

describe("flowc runner start", () => {
  it("warns loudly when --concurrency differs from the registered concurrency, and runs with the one given", async () => {
    const key = path.join(owner.home, "runner-two.json");
    expect((await owner.run("keygen", "--out", key)).code).toBe(0);
    const reg = await owner.run(
      "runner",
      "register",
      context,
      "--key-file",
      key,
      "--type",
      "sh",
      "--local",
      "--concurrency",
      "2",
    );
    expect(reg.code, reg.stderr).toBe(0);
    const id = /^runner (\d+) registered/.exec(reg.stdout)?.[1] as string;
    const work = path.join(tmp, "work-two");
    const started = startFlowc(
      ["runner", "start", context, id, "--key-file", key, "--pull", "--concurrency", "5", "--work-dir", work],
      owner.env,
    );
    try {
      await started.waitForLine(
        new RegExp(
          `WARNING: --concurrency 5, but runner ${id} is registered with concurrency 2: the coordinator sends it at most 2 jobs at once \\(the registration changes with PATCH /v1/contexts/${context}/runners/${id} \\{"concurrency": 5\\}`,
        ),
        30_000,
      );
      await started.waitForLine(/pulling from .*\(concurrency 5, /, 30_000);
    } finally {
      await started.kill();
    }
  });
});

describe("flowc names a key that is a runner's or nobody's", () => {
  it("refuses to register a runner's key as an actor, naming the runner", async () => {
    const robin = newUser(tmp, "robin");
    const run = await robin.run("--url", (worker as TestWorker).url, "--key-file", runnerKey, "actor", "register");
    expectOneErrorLine(
      run,
      1,
      new RegExp(`the key in ${runnerKey} is the key of runner ${runnerId} in context ${context}, not an actor's`),
    );
    expect(existsSync(robin.profile)).toBe(false);
  });

  it("says, after a 401, whose the key is: a runner's, nobody's, or another actor's", async () => {
    const url = (worker as TestWorker).url;
    const sam = newUser(tmp, "sam");
    const as = (key: string, actor: string) =>
      sam.run("--url", url, "--key-file", key, "--actor", actor, "actor", "show");
    const stranger = path.join(sam.home, "stranger.json");
    expect((await sam.run("keygen", "--out", stranger)).code).toBe(0);
    const cases: [string, string, RegExp][] = [
      [
        runnerKey,
        caller,
        new RegExp(
          `^  the key in ${runnerKey} is no actor's: it is the key of runner ${runnerId} in context ${context}\\.`,
        ),
      ],
      [stranger, "999", new RegExp(`^  the key in ${stranger} is nobody's: no actor or runner is registered with it`)],
      [
        path.join(owner.home, "key.json"),
        "999",
        new RegExp(`^  the key in .*key\\.json is actor ${caller}'s, not actor 999's: use --actor ${caller}`),
      ],
    ];
    for (const [key, actor, named] of cases) {
      const run = await as(key, actor);
      expect(run.code, run.stderr).toBe(1);
      expect(run.errors[0]).toMatch(/^flowc: 401 /);
      expect(run.errors[1], run.stderr).toMatch(named);
      expect(run.errors).toHaveLength(2);
    }
  });
});
