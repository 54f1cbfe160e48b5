import { readdirSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { readFlowFile } from "../../cli/flowfile.js";
import { FlowSubmission, resolveDag } from "../../shared/flow/index.js";

// Every flow file in examples/ is one the coordinator takes: it parses as a submission (every
// `when` type-checks, every `${…}` is a name) and its DAG resolves.

const root = path.resolve(import.meta.dirname, "../..");
const files = readdirSync(path.join(root, "examples")).filter((f) => /\.ya?ml$|\.json$/.test(f));

describe("examples/", () => {
  it.each(files)("%s is a valid flow", (file) => {
    const flow = readFlowFile(path.join("examples", file), root);
    const parsed = FlowSubmission.safeParse(flow.body);
    expect(parsed.error?.issues ?? []).toEqual([]);
    let next = 1;
    const dag = resolveDag(parsed.data?.jobs ?? [], () => next++);
    expect("issues" in dag ? dag.issues : []).toEqual([]);
  });
});
