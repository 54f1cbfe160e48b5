import { readdirSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { readFlowFile } from "../../cli/flowfile.js";
import { FlowSubmission, instantiate, resolveDag, TemplateFile } from "../../shared/flow/index.js";

// Every flow file in examples/ is one the coordinator takes: it parses as a submission (every
// `when` type-checks, every `${…}` is a name) and its DAG resolves. A template (`template*.yaml`)
// parses as a template file, and started with its defaults makes such a submission.

const root = path.resolve(import.meta.dirname, "../..");
const files = readdirSync(path.join(root, "examples")).filter((f) => /\.ya?ml$|\.json$/.test(f));
const isTemplate = (file: string) => file.startsWith("template");

/** The submission a file is: the file itself, or its template started with the defaults. */
function submissionOf(file: string): unknown {
  const body = readFlowFile(path.join("examples", file), root).body;
  if (!isTemplate(file)) return body;
  const template = TemplateFile.safeParse(body);
  expect(template.error?.issues ?? []).toEqual([]);
  const made = instantiate(template.data as TemplateFile, {});
  if ("issues" in made) throw new Error(`${file}: ${JSON.stringify(made.issues)}`);
  return made.flow;
}

describe("examples/", () => {
  it.each(files)("%s is a valid flow", (file) => {
    const parsed = FlowSubmission.safeParse(submissionOf(file));
    expect(parsed.error?.issues ?? []).toEqual([]);
    let next = 1;
    const dag = resolveDag(parsed.data?.jobs ?? [], () => next++);
    expect("issues" in dag ? dag.issues : []).toEqual([]);
  });

  it("has a template", () => {
    expect(files.filter(isTemplate)).not.toEqual([]);
  });
});
