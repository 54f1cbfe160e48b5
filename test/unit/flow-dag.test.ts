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
      depends: [],
      needs: "all_finished",
      allow_failure: false,
    });
  });

  it("accepts the model's dependends as an alias of depends", () => {
    expect(FlowJobInput.parse(jobIn({ depends: [1, "a"] })).depends).toEqual([1, "a"]);
    expect(FlowJobInput.parse(jobIn({ dependends: [2] })).depends).toEqual([2]);
    expect(FlowJobInput.parse(jobIn({ dependends: [] })).depends).toEqual([]);
  });

  it("refuses both depends and dependends, naming the alias", () => {
    const out = FlowJobInput.safeParse(jobIn({ depends: [1], dependends: [1] }));
    expect(out.success).toBe(false);
    expect(out.error?.issues.map((i) => i.path)).toEqual([["dependends"]]);
  });

  it("refuses unknown fields, bad names and bad references", () => {
    expect(FlowJobInput.safeParse({ ...jobIn(), extra: 1 }).success).toBe(false);
    for (const name of ["1abc", "", "a b", "x".repeat(65)])
      expect(FlowJobInput.safeParse(jobIn({ name })).success).toBe(false);
    expect(FlowJobInput.safeParse(jobIn({ name: "_a.b-c9" })).success).toBe(true);
    expect(FlowJobInput.safeParse(jobIn({ depends: [0] })).success).toBe(false);
    expect(FlowJobInput.safeParse(jobIn({ depends: ["no spaces"] })).success).toBe(false);
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

  it("takes 1 to 10,000 jobs", () => {
    expect(FLOW_LIMITS.jobsPerFlow).toBe(10_000);
    expect(FlowSubmission.safeParse({ jobs: Array.from({ length: 10_000 }, () => jobIn()) }).success).toBe(true);
    const over = FlowSubmission.safeParse({ jobs: Array.from({ length: 10_001 }, () => jobIn()) });
    expect(over.success).toBe(false);
    expect(over.error?.issues.map((i) => i.path)).toEqual([["jobs"]]);
    expect(FlowSubmission.safeParse({ jobs: [] }).success).toBe(false);
  });

  it("names the job at fault", () => {
    const out = FlowSubmission.safeParse({ jobs: [jobIn(), jobIn({ depends: ["a"], dependends: ["a"] })] });
    expect(out.error?.issues.map((i) => i.path)).toEqual([["jobs", 1, "dependends"]]);
    const big = FlowSubmission.safeParse({ jobs: [jobIn(), jobIn(), jobIn({ script: "x".repeat(20_000) })] });
    expect(big.error?.issues.map((i) => i.path)).toEqual([["jobs", 2, "script"]]);
  });

  it("refuses timeouts under a second and unknown fields", () => {
    expect(FlowSubmission.safeParse({ jobs: [jobIn()], timeouts: { timeout_ack: 0 } }).success).toBe(false);
    expect(
      FlowSubmission.safeParse({ jobs: [jobIn()], timeouts: { timeout: 5, timeout_ack: 5, timeout_result: 5 } })
        .success,
    ).toBe(true);
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
    expect("issues" in resolveDag(parse([jobIn({ depends: ["missing"] })]), allocate)).toBe(true);
    expect("issues" in resolveDag(parse([jobIn({ name: "a", depends: ["a"] })]), allocate)).toBe(true);
    expect(allocate).not.toHaveBeenCalled();
  });

  it("never hands out an allocated id that a job of the flow already has", () => {
    // The allocator knows nothing of the ids given in the submission.
    const jobs = jobsOf([jobIn({ id: 100, name: "a" }), jobIn({ name: "b", depends: ["a"] }), jobIn({ id: 101 })]);
    expect(jobs.map((j) => j.id)).toEqual([100, 102, 101]);
    expect(jobs[1]?.depends).toEqual([100]);
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
      jobIn({ depends: ["merge", "fetch", 42] }),
    ]);
    expect(jobs.map((j) => [j.id, j.depends])).toEqual([
      [100, []],
      [42, []],
      [101, [100, 42]],
      [102, [101, 100, 42]],
    ]);
  });

  it("lists a job referred to by id and by name once", () => {
    const jobs = jobsOf([jobIn({ id: 3, name: "a" }), jobIn({ depends: ["a", 3, "a"] })]);
    expect(jobs[1]?.depends).toEqual([3]);
  });

  it("may refer to a later job of the list", () => {
    const jobs = jobsOf([jobIn({ depends: ["b"] }), jobIn({ name: "b" })]);
    expect(jobs[0]?.depends).toEqual([101]);
  });

  it("names each unknown dependency by job and place", () => {
    const issues = issuesOf([jobIn({ name: "a" }), jobIn({ name: "b", depends: ["a", "nope", 77] })]);
    expect(issues.map((i) => i.field)).toEqual(["jobs.1.depends.1", "jobs.1.depends.2"]);
    expect(issues[0]?.message).toContain('job b depends on "nope"');
    expect(issues[1]?.message).toContain("77");
  });

  it("does not resolve a name by id or an id by name", () => {
    // Job 100 is allocated, so it cannot be referred to by an id the submitter did not know.
    expect(issuesOf([jobIn({ name: "a" }), jobIn({ depends: [100] })]).map((i) => i.field)).toEqual([
      "jobs.1.depends.0",
    ]);
  });
});

describe("resolveDag: cycles", () => {
  function cycleOf(inputs: JobIn[]): DagIssue {
    const issues = issuesOf(inputs);
    expect(issues).toHaveLength(1);
    return issues[0] as DagIssue;
  }

  it("refuses a job that depends on itself", () => {
    const issue = cycleOf([jobIn({ name: "x" }), jobIn({ name: "a", depends: ["a"] })]);
    expect(issue.field).toBe("jobs.1.depends");
    expect(issue.message).toContain("a → a");
  });

  it("names a longer cycle's jobs in dependency order", () => {
    const issue = cycleOf([
      jobIn({ name: "a", depends: ["b"] }),
      jobIn({ name: "b", depends: ["c"] }),
      jobIn({ name: "c", depends: ["a"] }),
    ]);
    expect(issue.message).toContain("a → b → c → a");
    expect(issue.field).toBe("jobs.0.depends");
  });

  it("names only the jobs on the cycle, not the path that led to it", () => {
    const issue = cycleOf([
      jobIn({ name: "entry", depends: ["p"] }),
      jobIn({ name: "p", depends: ["q"] }),
      jobIn({ name: "q", depends: ["r"] }),
      jobIn({ name: "r", depends: ["p"] }),
    ]);
    expect(issue.message).toMatch(/: p → q → r → p /);
    expect(issue.field).toBe("jobs.1.depends");
  });

  it("labels unnamed jobs by id or by place", () => {
    const issue = cycleOf([jobIn({ id: 8, depends: [2] }), jobIn({ depends: [8] }), jobIn({ id: 2, depends: [8] })]);
    expect(issue.message).toMatch(/#8 → #2 → #8/);
    const unnamed = cycleOf([jobIn({ id: 8 }), jobIn({ id: 2, depends: [8, 9] }), jobIn({ id: 9, depends: [2] })]);
    expect(unnamed.message).toContain("#2 → #9 → #2");
  });

  it("finds a cycle among valid diamonds", () => {
    const issue = cycleOf([
      jobIn({ name: "top" }),
      jobIn({ name: "l", depends: ["top"] }),
      jobIn({ name: "r", depends: ["top", "bottom"] }),
      jobIn({ name: "bottom", depends: ["l", "r"] }),
    ]);
    expect(issue.message).toContain("r → bottom → r");
  });
});

describe("resolveDag: size", () => {
  const chain = (n: number, dependsOn: (i: number) => number | undefined): JobIn[] =>
    Array.from({ length: n }, (_, i) => {
      const dep = dependsOn(i);
      return jobIn({ name: `j${i}`, ...(dep !== undefined ? { depends: [`j${dep}`] } : {}) });
    });

  it("resolves a 1,000-job chain in either direction without deep recursion", () => {
    const forward = jobsOf(chain(1000, (i) => (i > 0 ? i - 1 : undefined)));
    expect(forward).toHaveLength(1000);
    expect(forward[999]?.depends).toEqual([100 + 998]);
    const backward = jobsOf(chain(1000, (i) => (i < 999 ? i + 1 : undefined)));
    expect(backward[0]?.depends).toEqual([101]);
  });

  it("names a 1,000-job cycle", () => {
    const issue = issuesOf(chain(1000, (i) => (i < 999 ? i + 1 : 0)))[0];
    expect(issue?.message.split(" → ")).toHaveLength(1001);
    expect(issue?.message).toMatch(/: j0 → j1 → j2 → .* → j999 → j0 /);
  });

  it("resolves a dense 1,000-job DAG", () => {
    const jobs = jobsOf(
      Array.from({ length: 1000 }, (_, i) =>
        jobIn({ id: i + 1, depends: Array.from({ length: Math.min(i, 40) }, (_, k) => i - k) }),
      ),
    );
    expect(jobs[999]?.depends).toHaveLength(40);
  });
});
