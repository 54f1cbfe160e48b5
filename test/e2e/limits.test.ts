import { describe, expect, it } from "vitest";
import { ApiError } from "../../shared/client/index.js";
import { SIZE_LIMITS, type FlowView } from "../../shared/model/index.js";
import { answersIn, flowEnd } from "../support/flow-runs.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// Every size limit of docs/limits.md, from outside: what is too big is refused at the edge with a
// problem naming the field and the limit, or ends its job in error saying so; never a 500, never
// a flow left waiting; and no storage call grows with a result's copies. The test runner reports
// a result of n characters for a job named `bytes-<n>…`. Sizes of storage calls are read off the
// REST endpoint (the largest request and answer it saw).

const { stack, admin } = usePrivateStack("limits", { cron: false });

/** What docs/limits.md promises of any storage call: well under storage's 10 MB. */
const WORST_CASE_BYTES = 8 * 1024 * 1024;
const job = (name: string, depends: string[] = []) => ({ name, script: "true", script_type: "sh" as const, depends });

async function contextWithRunner(): Promise<{ ctx: number; proc: { output(): string } }> {
  const ctx = (await admin().client.createContext()).id;
  const proc = await (await stack().registerTestRunner(admin().client, ctx)).start();
  return { ctx, proc };
}

/** The problem a request was answered with (it must fail). */
async function problemOf(call: Promise<unknown>): Promise<ApiError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(error instanceof ApiError)) throw new Error(`expected a problem, got ${String(error)}`);
  return error;
}

const errorOf = (view: FlowView, key: string) => view.jobs.find((j) => j.key === key)?.error ?? "";

describe("size limits", () => {
  it("refuses a body over 1 MiB with 413 naming the body and the limit, before reading it all", async () => {
    const ctx = (await admin().client.createContext()).id;
    const big = { jobs: [job("a")], env_vars: { BIG: "x".repeat(SIZE_LIMITS.requestBody) } };
    const refused = await problemOf(admin().client.submitFlow(ctx, big));
    expect(refused.status).toBe(413);
    expect(refused.problem).toMatchObject({
      type: "/problems/request-too-large",
      field: "body",
      limit: SIZE_LIMITS.requestBody,
    });
  });

  it("refuses a flow's or a job's env_vars over 64 KiB with 400 naming the field", async () => {
    const ctx = (await admin().client.createContext()).id;
    const env = { BIG: "x".repeat(SIZE_LIMITS.env) };
    const flowEnv = await problemOf(admin().client.submitFlow(ctx, { jobs: [job("a")], env_vars: env }));
    expect(flowEnv.status).toBe(400);
    expect(flowEnv.problem).toMatchObject({ field: "body.env_vars" });
    expect(flowEnv.message).toContain("64 KiB");
    const jobEnv = await problemOf(admin().client.submitFlow(ctx, { jobs: [{ ...job("a"), env_vars: env }] }));
    expect(jobEnv.problem).toMatchObject({ field: "body.jobs.0.env_vars" });
  });

  it("ends a job whose result is over 64 KiB in error saying so, and its flow with it", async () => {
    const { ctx } = await contextWithRunner();
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [job("bytes-70000"), job("after", ["bytes-70000"])],
    });
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status).toBe("error");
    expect(errorOf(view, "bytes-70000")).toMatch(/its result is 68\.\d KiB, over the limit of 64 KiB for a result/);
    expect(errorOf(view, "after")).toBe("not run: dependency bytes-70000 failed");
  });

  it("passes a 60 KiB result to ten dependents without copying it into storage per dependent", async () => {
    const { ctx } = await contextWithRunner();
    const before = stack().restLargest().request;
    const dependents = Array.from({ length: 10 }, (_, i) => job(`d${i}`, ["bytes-60000"]));
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs: [job("bytes-60000"), ...dependents] });
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status).toBe("finished");
    expect(view.result["bytes-60000"]?.blob).toHaveLength(60_000);
    // The result is written once; the dependents' messages hold their own variables only (their
    // environment, with the result twice, is built as each delivery goes out).
    const largest = stack().restLargest().request;
    console.log(`limits: a 60 KiB result and 10 dependents: largest storage request ${largest} bytes`);
    expect(Math.max(largest, before)).toBeLessThan(2 * SIZE_LIMITS.result);
    const mail = (await admin().client.request("GET", `/v1/contexts/${ctx}/inbox`)) as {
      messages: { flow_result?: { result?: Record<string, Record<string, string>> } }[];
    };
    expect(mail.messages[0]?.flow_result?.result?.["bytes-60000"]?.blob).toHaveLength(60_000);
  });

  it("does not run a job whose inputs are over 120 KiB, saying so", async () => {
    const { ctx } = await contextWithRunner();
    const deps = ["bytes-50000-a", "bytes-50000-b", "bytes-50000-c"];
    const flow = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [...deps.map((d) => job(d)), job("all", deps)],
    });
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status).toBe("error");
    expect(errorOf(view, "all")).toMatch(
      /^not run: its inputs \(its dependencies' results\) are 146\.\d KiB, over the limit of 120 KiB/,
    );
    expect(view.jobs.find((j) => j.key === "all")?.attempt).toBe(0);
  });

  it("ends the jobs whose results would take the flow's past 2 MiB, and the flow with them", async () => {
    const { ctx } = await contextWithRunner();
    const jobs = Array.from({ length: 40 }, (_, i) => job(`bytes-60000-${i}`));
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
    const view = await flowEnd(admin().client, ctx, flow.id);
    expect(view.status).toBe("error");
    const over = view.jobs.filter((j) => j.error?.includes("would take the flow's results to"));
    expect(over.length).toBeGreaterThan(0);
    const kept = JSON.stringify(view.result).length;
    expect(kept).toBeLessThanOrEqual(SIZE_LIMITS.flowResults + 40 * 64);
  });

  it("answers a result report over 1 MiB 413 (the reference runner reports an error instead)", async () => {
    const { ctx, proc } = await contextWithRunner();
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs: [job("bytes-3000000")] });
    await answersIn(proc, new RegExp(`^answered result bytes-3000000 flow ${flow.id} .* 413 request-too-large$`), 1);
    await admin().client.cancelFlow(ctx, flow.id, "the test is done with it");

    const ctx2 = (await admin().client.createContext()).id;
    const runner = await stack().registerReferenceRunner(admin().client, ctx2, "push");
    await runner.start();
    const script = `python3 -c "print('big=' + 'x' * 3000000)" > "$RESULT_FILE"`;
    const ref = await admin().client.submitFlow(ctx2, {
      start: true,
      jobs: [{ name: "big", script, script_type: "sh" }],
    });
    const view = await flowEnd(admin().client, ctx2, ref.id);
    expect(view.status).toBe("error");
    expect(errorOf(view, "big")).toMatch(/RESULT_FILE is \d+ bytes|over the limit of 64 KiB/);
    expect(stack().workerLog()).not.toMatch(/ 500 /);
  });

  // After the small ones (whose own largest call a test checks), before the flow file of 2,000 jobs.
  it("keeps growth's storage calls under 10 MB: a report adding 1,000 jobs in 1 MiB, a map of 1,000 items", async () => {
    const { ctx } = await contextWithRunner();
    const count = 1000;
    const script = Math.floor((SIZE_LIMITS.requestBody * 0.85) / count);
    const seed = { ...job("seed"), env_vars: { ADD_JOBS_MANY: `${count}:${script}` } };
    const grown = await admin().client.submitFlow(ctx, { start: true, jobs: [seed] });
    const many = await flowEnd(admin().client, ctx, grown.id, 120_000);
    expect(many.jobs).toHaveLength(count + 1);
    expect(many.status).toBe("finished");
    const items = JSON.stringify(Array.from({ length: count }, (_, i) => `${"i".repeat(40)}-${i}`));
    const list = { ...job("list"), env_vars: { ADD_RESULT: JSON.stringify({ files: items }) } };
    const mapped = await admin().client.submitFlow(ctx, {
      start: true,
      jobs: [list, { ...job("each", ["list"]), map: { over: "list.files" } }],
    });
    const map = await flowEnd(admin().client, ctx, mapped.id, 120_000);
    expect(map.jobs).toHaveLength(count + 2);
    expect(map.status).toBe("finished");
    const written = stack().restLargest();
    console.log(
      `limits: growth's worst cases: largest storage request so far ${written.request} bytes (1,000 jobs of ${script} bytes added by one report; a map of 1,000 items)`,
    );
    expect(written.request).toBeLessThan(WORST_CASE_BYTES);
  });

  it("keeps the worst cases' storage calls under 10 MB: a 1 MiB flow file of 2,000 jobs, 2 MiB of results, a rebuild", async () => {
    const { ctx } = await contextWithRunner();
    const names = Array.from({ length: 2000 }, (_, i) => `bytes-1100-${i}`);
    // Every job's script padded so that the whole flow file is just under the body's limit.
    const bare = JSON.stringify({ start: true, jobs: names.map((n) => job(n)) }).length;
    const pad = Math.floor((SIZE_LIMITS.requestBody - bare - 1000) / names.length);
    const jobs = names.map((n) => ({ ...job(n), script: `#${"x".repeat(pad - 1)}` }));
    const flow = await admin().client.submitFlow(ctx, { start: true, jobs });
    const view = await flowEnd(admin().client, ctx, flow.id, 120_000);
    // 2,000 results of about 1.1 KiB pass 2 MiB: the last ones end in error, the flow with them.
    expect(view.status).toBe("error");
    const written = stack().restLargest();
    // A rebuild reads every job's record and latest message back in one request.
    await stack().restartWorker();
    const again = await admin().client.loadFlow(ctx, flow.id);
    expect(Object.keys(again.result).length).toBe(Object.keys(view.result).length);
    const read = stack().restLargest();
    console.log(
      `limits: worst cases: largest storage request ${written.request} bytes, largest answer ${read.response} bytes`,
    );
    expect(read.request).toBeLessThan(WORST_CASE_BYTES);
    expect(read.response).toBeLessThan(WORST_CASE_BYTES);
  });
});
