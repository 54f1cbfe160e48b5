import { describe, expect, it } from "vitest";
import { JobTable, jobTableCounts, type JobState } from "../../shared/flow/index.js";
import { mulberry32 } from "../support/random.js";

// The persistent job table (shared/flow/job-table.ts): a set leaves the table it came from as it
// was and shares every job it did not change; a draft copies each node once; a diff finds what
// changed; ids of any size fit, and the table grows to them. Checked against a plain Map.

const job = (id: number, status: JobState["status"] = "dispatched"): JobState => ({
  id,
  depends: [],
  dependents: [],
  spec: { script: "", timeout: 0, retries: 0, env_vars: {}, prerequisites: [] },
  messageBase: 0,
  status,
  attempt: 0,
  attemptFloor: 0,
});

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

describe("JobTable", () => {
  it("holds jobs by id, reads them back, and iterates them in id order", () => {
    const ids = [5, 1_000_003, 31, 32, 0, 1023, 1024, 2 ** 40 + 7];
    const table = JobTable.of(ids.map((id) => job(id)));
    expect(table.size).toBe(ids.length);
    for (const id of ids) expect(table.get(id)?.id).toBe(id);
    expect(table.get(6)).toBeUndefined();
    expect(table.get(2 ** 50)).toBeUndefined();
    expect(table.has(31)).toBe(true);
    expect(table.ids()).toEqual([...ids].sort((a, b) => a - b));
    expect(() => table.job(6)).toThrow(/no job 6/);
    expect(JobTable.empty<JobState>().size).toBe(0);
    expect(JobTable.empty<JobState>().values()).toEqual([]);
  });

  it("leaves the table it came from as it was, and shares every job it did not change", () => {
    const before = JobTable.of(range(1_000, 2_000).map((id) => job(id)));
    const after = before.set(1_500, job(1_500, "finished"));
    expect(before.get(1_500)?.status).toBe("dispatched");
    expect(after.get(1_500)?.status).toBe("finished");
    expect(after.size).toBe(2_000);
    for (const id of range(1_000, 2_000)) if (id !== 1_500) expect(after.get(id)).toBe(before.get(id));
    expect(after.diff(before)).toEqual([1_500]);
    expect(before.diff(before)).toEqual([]);
  });

  it("grows: a new id past the others, however far, adds a job and keeps the rest", () => {
    const small = JobTable.of(range(100, 10).map((id) => job(id)));
    const grown = small.set(5_000_000, job(5_000_000)).set(110, job(110));
    expect(grown.size).toBe(12);
    expect(small.size).toBe(10);
    expect(small.get(5_000_000)).toBeUndefined();
    expect(grown.ids()).toEqual([...range(100, 11), 5_000_000]);
    expect(grown.diff(small)).toEqual([110, 5_000_000]);
    expect(small.diff(grown)).toEqual([110, 5_000_000]);
    for (const id of range(100, 10)) expect(grown.get(id)).toBe(small.get(id));
  });

  it("refuses an id that is not a non-negative safe integer", () => {
    for (const bad of [-1, 1.5, Number.NaN, 2 ** 53])
      expect(() => JobTable.empty<JobState>().set(bad, job(1))).toThrow(RangeError);
  });

  it("a draft reads its own writes, copies each node it touches once, and is immutable once sealed", () => {
    const base = JobTable.of(range(0, 10_000).map((id) => job(id)));
    const draft = base.draft();
    const copies = jobTableCounts.copies;
    draft.put(7, job(7, "started"));
    const first = jobTableCounts.copies - copies;
    // A 10,000-id trie has three levels: the first write copies the path, the next ones in the
    // same leaf nothing more.
    expect(first).toBe(3);
    for (const id of [8, 9, 10]) draft.put(id, job(id, "started"));
    expect(jobTableCounts.copies - copies).toBe(3);
    expect(draft.get(7)?.status).toBe("started");
    expect(base.get(7)?.status).toBe("dispatched");
    const sealed = draft.seal();
    expect(() => draft.put(11, job(11))).toThrow(/sealed/);
    // A set on a sealed table is persistent like any other: it copies, and leaves it alone.
    const later = sealed.set(7, job(7, "finished"));
    expect(sealed.get(7)?.status).toBe("started");
    expect(later.get(7)?.status).toBe("finished");
    expect(later.diff(base)).toEqual([7, 8, 9, 10]);
  });

  it("agrees with a Map through random sets over persistent versions", () => {
    const random = mulberry32(33);
    const versions: { table: JobTable<JobState>; map: Map<number, JobState> }[] = [
      { table: JobTable.empty<JobState>(), map: new Map() },
    ];
    for (let step = 0; step < 3_000; step++) {
      const from = versions[Math.floor(random() * versions.length)] as (typeof versions)[number];
      const id = random() < 0.9 ? Math.floor(random() * 5_000) : Math.floor(random() * 2 ** 36);
      const value = job(id, random() < 0.5 ? "finished" : "started");
      versions.push({ table: from.table.set(id, value), map: new Map(from.map).set(id, value) });
      if (versions.length > 50) versions.shift();
    }
    for (const { table, map } of versions) {
      expect(table.size).toBe(map.size);
      expect(table.ids()).toEqual([...map.keys()].sort((a, b) => a - b));
      for (const [id, value] of map) expect(table.get(id)).toBe(value);
    }
    const [a, b] = [versions[0], versions[versions.length - 1]] as [
      (typeof versions)[number],
      (typeof versions)[number],
    ];
    const differ = [...new Set([...a.map.keys(), ...b.map.keys()])].filter((id) => a.map.get(id) !== b.map.get(id));
    expect(a.table.diff(b.table)).toEqual(differ.sort((x, y) => x - y));
  });

  it("prints as the jobs by id", () => {
    expect(JSON.parse(JSON.stringify(JobTable.of([job(3), job(1)])))).toEqual({ 1: job(1), 3: job(3) });
  });
});
