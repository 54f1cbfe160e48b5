import { describe, expect, it, vi } from "vitest";
import { FLOW_LIMITS, FlowJobInput, FlowSubmission, resolveDag, type DagIssue } from "../../shared/flow/index.js";
import { jobIn, resolved as jobsOf, resolveInputs, type JobIn } from "./flow-sim.js";

function parse(inputs: JobIn[]): FlowJobInput[] {
  return inputs.map((input) => FlowJobInput.parse(input));
}

/** The issues resolving `inputs` (ids from 100 on) names; throws if it resolves. */
function issuesOf(inputs: JobIn[]): DagIssue[] {
  const out = resolveInputs(inputs);
  if (!("issues" in out)) throw new Error("expected issues");
  return out.issues;
}

describe("FlowJobInput", () => {
  it("fills in the defaults", () => {
    expect(FlowJobInput.parse(jobIn())).toEqual({
      script: "echo hi",
      script_type: "sh",
      timeout: 300,
      retries: 0,
      env_vars: {},
      prerequisites: [],
      dependends: [],
    });
  });

  it("accepts depends as an alias of dependends", () => {
    expect(FlowJobInput.parse(jobIn({ depends: [1, "a"] })).dependends).toEqual([1, "a"]);
    expect(FlowJobInput.parse(jobIn({ dependends: [2] })).dependends).toEqual([2]);
    expect(FlowJobInput.parse(jobIn({ depends: [] })).dependends).toEqual([]);
  });

  it("refuses both dependends and depends, naming depends", () => {
    const out = FlowJobInput.safeParse(jobIn({ depends: [1], dependends: [1] }));
    expect(out.success).toBe(false);
    expect(out.error?.issues.map((i) => i.path)).toEqual([["depends"]]);
  });

  it("refuses unknown fields, bad names and bad references", () => {
    expect(FlowJobInput.safeParse({ ...jobIn(), extra: 1 }).success).toBe(false);
    for (const name of ["1abc", "", "a b", "x".repeat(65)]) expect(FlowJobInput.safeParse(jobIn({ name })).success).toBe(false);
    expect(FlowJobInput.safeParse(jobIn({ name: "_a.b-c9" })).success).toBe(true);
    expect(FlowJobInput.safeParse(jobIn({ dependends: [0] })).success).toBe(false);
    expect(FlowJobInput.safeParse(jobIn({ dependends: ["no spaces"] })).success).toBe(false);
    expect(FlowJobInput.safeParse(jobIn({ id: 0 })).success).toBe(false);
  });

  it("limits a script to 16 KiB of UTF-8", () => {
    expect(FLOW_LIMITS.scriptBytes).toBe(16 * 1024);
    expect(FlowJobInput.safeParse(jobIn({ script: "x".repeat(16 * 1024) })).success).toBe(true);
    const over = FlowJobInput.safeParse(jobIn({ script: "x".repeat(16 * 1024 + 1) }));
    expect(over.success).toBe(false);
    expect(over.error?.issues[0]?.path).toEqual(["script"]);
    // 8,193 characters, 16,386 bytes.
    expect(FlowJobInput.safeParse(jobIn({ script: "é".repeat(8193) })).success).toBe(false);
  });
});

describe("FlowSubmission", () => {
  it("fills in the defaults", () => {
    expect(FlowSubmission.parse({ jobs: [jobIn()] })).toMatchObject({ env_vars: {}, start: false, timeouts: {} });
  });

  it("takes 1 to 1,000 jobs", () => {
    expect(FlowSubmission.safeParse({ jobs: Array.from({ length: 1000 }, () => jobIn()) }).success).toBe(true);
    const over = FlowSubmission.safeParse({ jobs: Array.from({ length: 1001 }, () => jobIn()) });
    expect(over.success).toBe(false);
    expect(over.error?.issues.map((i) => i.path)).toEqual([["jobs"]]);
    expect(FlowSubmission.safeParse({ jobs: [] }).success).toBe(false);
  });

  it("names the job at fault", () => {
    const out = FlowSubmission.safeParse({ jobs: [jobIn(), jobIn({ depends: ["a"], dependends: ["a"] })] });
    expect(out.error?.issues.map((i) => i.path)).toEqual([["jobs", 1, "depends"]]);
    const big = FlowSubmission.safeParse({ jobs: [jobIn(), jobIn(), jobIn({ script: "x".repeat(20_000) })] });
    expect(big.error?.issues.map((i) => i.path)).toEqual([["jobs", 2, "script"]]);
  });

  it("refuses timeouts under a second and unknown fields", () => {
    expect(FlowSubmission.safeParse({ jobs: [jobIn()], timeouts: { timeout_ack: 0 } }).success).toBe(false);
    expect(FlowSubmission.safeParse({ jobs: [jobIn()], timeouts: { timeout: 5, timeout_ack: 5, timeout_result: 5 } }).success).toBe(true);
    expect(FlowSubmission.safeParse({ jobs: [jobIn()], nope: true }).success).toBe(false);
  });
});

describe("resolveDag: ids", () => {
  it("keeps given ids and allocates the others in order, only for jobs without an id", () => {
    const allocate = vi.fn<() => number>();
    allocate.mockReturnValueOnce(100).mockReturnValueOnce(101);
    const out = resolveDag(parse([jobIn({ id: 5 }), jobIn({ name: "b" }), jobIn({ id: 9 }), jobIn()]), allocate);
    expect(allocate).toHaveBeenCalledTimes(2);
    if ("issues" in out) throw new Error("unexpected issues");
    expect(out.jobs.map((j) => j.id)).toEqual([5, 100, 9, 101]);
    expect(out.jobs.map((j) => j.name)).toEqual([undefined, "b", undefined, undefined]);
  });

  it("does not allocate when the DAG has issues", () => {
    const allocate = vi.fn(() => 1);
    expect("issues" in resolveDag(parse([jobIn({ dependends: ["missing"] })]), allocate)).toBe(true);
    expect("issues" in resolveDag(parse([jobIn({ name: "a", dependends: ["a"] })]), allocate)).toBe(true);
    expect(allocate).not.toHaveBeenCalled();
  });

  it("never hands out an allocated id that a job of the flow already has", () => {
    // The allocator knows nothing of the ids given in the submission.
    const jobs = jobsOf([jobIn({ id: 100, name: "a" }), jobIn({ name: "b", dependends: ["a"] }), jobIn({ id: 101 })]);
    expect(jobs.map((j) => j.id)).toEqual([100, 102, 101]);
    expect(jobs[1]?.dependends).toEqual([100]);
  });

  it("refuses duplicate ids and names, naming the later job", () => {
    const issues = issuesOf([jobIn({ id: 4, name: "a" }), jobIn({ id: 5, name: "a" }), jobIn({ id: 4 })]);
    expect(issues.map((i) => i.field)).toEqual(["jobs.1.name", "jobs.2.id"]);
    expect(issues[0]?.message).toContain("jobs.0");
    expect(issues[1]?.message).toContain("duplicate id 4");
  });
});

describe("resolveDag: references", () => {
  it("resolves references by id and by name to ids", () => {
    const jobs = jobsOf([
      jobIn({ name: "fetch" }),
      jobIn({ id: 42 }),
      jobIn({ name: "merge", depends: ["fetch", 42] }),
      jobIn({ dependends: ["merge", "fetch", 42] }),
    ]);
    expect(jobs.map((j) => [j.id, j.dependends])).toEqual([
      [100, []],
      [42, []],
      [101, [100, 42]],
      [102, [101, 100, 42]],
    ]);
  });

  it("lists a job referred to by id and by name once", () => {
    const jobs = jobsOf([jobIn({ id: 3, name: "a" }), jobIn({ dependends: ["a", 3, "a"] })]);
    expect(jobs[1]?.dependends).toEqual([3]);
  });

  it("may refer to a later job of the list", () => {
    const jobs = jobsOf([jobIn({ dependends: ["b"] }), jobIn({ name: "b" })]);
    expect(jobs[0]?.dependends).toEqual([101]);
  });

  it("names each unknown dependency by job and place", () => {
    const issues = issuesOf([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a", "nope", 77] })]);
    expect(issues.map((i) => i.field)).toEqual(["jobs.1.dependends.1", "jobs.1.dependends.2"]);
    expect(issues[0]?.message).toContain('job b depends on "nope"');
    expect(issues[1]?.message).toContain("77");
  });

  it("does not resolve a name by id or an id by name", () => {
    // Job 100 is allocated, so it cannot be referred to by an id the submitter did not know.
    expect(issuesOf([jobIn({ name: "a" }), jobIn({ dependends: [100] })]).map((i) => i.field)).toEqual(["jobs.1.dependends.0"]);
  });
});

describe("resolveDag: cycles", () => {
  function cycleOf(inputs: JobIn[]): DagIssue {
    const issues = issuesOf(inputs);
    expect(issues).toHaveLength(1);
    return issues[0] as DagIssue;
  }

  it("refuses a job that depends on itself", () => {
    const issue = cycleOf([jobIn({ name: "x" }), jobIn({ name: "a", dependends: ["a"] })]);
    expect(issue.field).toBe("jobs.1.dependends");
    expect(issue.message).toContain("a → a");
  });

  it("names a longer cycle's jobs in dependency order", () => {
    const issue = cycleOf([
      jobIn({ name: "a", dependends: ["b"] }),
      jobIn({ name: "b", dependends: ["c"] }),
      jobIn({ name: "c", dependends: ["a"] }),
    ]);
    expect(issue.message).toContain("a → b → c → a");
    expect(issue.field).toBe("jobs.0.dependends");
  });

  it("names only the jobs on the cycle, not the path that led to it", () => {
    const issue = cycleOf([
      jobIn({ name: "entry", dependends: ["p"] }),
      jobIn({ name: "p", dependends: ["q"] }),
      jobIn({ name: "q", dependends: ["r"] }),
      jobIn({ name: "r", dependends: ["p"] }),
    ]);
    expect(issue.message).toMatch(/: p → q → r → p /);
    expect(issue.field).toBe("jobs.1.dependends");
  });

  it("labels unnamed jobs by id or by place", () => {
    const issue = cycleOf([jobIn({ id: 8, dependends: [2] }), jobIn({ dependends: [8] }), jobIn({ id: 2, dependends: [8] })]);
    expect(issue.message).toMatch(/#8 → #2 → #8/);
    const unnamed = cycleOf([jobIn({ id: 8 }), jobIn({ id: 2, dependends: [8, 9] }), jobIn({ id: 9, dependends: [2] })]);
    expect(unnamed.message).toContain("#2 → #9 → #2");
  });

  it("finds a cycle among valid diamonds", () => {
    const issue = cycleOf([
      jobIn({ name: "top" }),
      jobIn({ name: "l", dependends: ["top"] }),
      jobIn({ name: "r", dependends: ["top", "bottom"] }),
      jobIn({ name: "bottom", dependends: ["l", "r"] }),
    ]);
    expect(issue.message).toContain("r → bottom → r");
  });
});

describe("resolveDag: size", () => {
  const chain = (n: number, dependsOn: (i: number) => number | undefined): JobIn[] =>
    Array.from({ length: n }, (_, i) => {
      const dep = dependsOn(i);
      return jobIn({ name: `j${i}`, ...(dep !== undefined ? { dependends: [`j${dep}`] } : {}) });
    });

  it("resolves a 1,000-job chain in either direction without deep recursion", () => {
    const forward = jobsOf(chain(1000, (i) => (i > 0 ? i - 1 : undefined)));
    expect(forward).toHaveLength(1000);
    expect(forward[999]?.dependends).toEqual([100 + 998]);
    const backward = jobsOf(chain(1000, (i) => (i < 999 ? i + 1 : undefined)));
    expect(backward[0]?.dependends).toEqual([101]);
  });

  it("names a 1,000-job cycle", () => {
    const issue = issuesOf(chain(1000, (i) => (i < 999 ? i + 1 : 0)))[0];
    expect(issue?.message.split(" → ")).toHaveLength(1001);
    expect(issue?.message).toMatch(/: j0 → j1 → j2 → .* → j999 → j0 /);
  });

  it("resolves a dense 1,000-job DAG", () => {
    const jobs = jobsOf(Array.from({ length: 1000 }, (_, i) => jobIn({ id: i + 1, dependends: Array.from({ length: Math.min(i, 40) }, (_, k) => i - k) })));
    expect(jobs[999]?.dependends).toHaveLength(40);
  });
});
