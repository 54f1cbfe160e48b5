import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { expectOneErrorLine, newUser, register } from "../support/flowc.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * Flow files flowc or the coordinator refuses, as a user meets them: real `flowc` processes
 * against a real `wrangler dev` Worker. Each refusal points at the file's line (a YAML or JSON
 * syntax error, a cycle, fields the coordinator refused with what to do instead) and stores
 * nothing. No runner: nothing here runs.
 */

const tmp = mkdtempSync(path.join(tmpdir(), "flowc-flow-files-test-"));
let worker: TestWorker | undefined;
const owner = newUser(tmp, "owner", { profileVar: true });
let contextId = "";

beforeAll(async () => {
  worker = await startTestWorker("cli-flow-files", tmp);
  await register(owner, worker.url);
  const created = await owner.run("context", "create");
  expect(created.code, created.stderr).toBe(0);
  contextId = /^context (\d+) created/.exec(created.stdout)?.[1] as string;
});

afterAll(async () => {
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

describe("flowc refuses flow files", () => {
  it("points at the line of a YAML or JSON syntax error, and at the field the coordinator refused", async () => {
    const file = (name: string, text: string) => {
      const full = path.join(owner.home, name);
      writeFileSync(full, text);
      return full;
    };
    const badYaml = file(
      "bad.yaml",
      'jobs:\n  - name: a\n    script_type: sh\n    script: "true"\n     depends: [b]\n',
    );
    expectOneErrorLine(
      await owner.run("flow", "submit", contextId, badYaml),
      1,
      new RegExp(`^flowc: ${badYaml}:5:\\d+: `),
    );
    const badJson = file("bad.json", '{\n  "jobs": [\n    {"name": "a" "script": "true"}\n  ]\n}\n');
    expectOneErrorLine(
      await owner.run("flow", "submit", contextId, badJson),
      1,
      new RegExp(`^flowc: ${badJson}:3:\\d+: not valid JSON: `),
    );

    const cycle = file(
      "cycle.yaml",
      'jobs:\n  - name: a\n    script_type: sh\n    script: "true"\n    depends: [b]\n  - name: b\n    script_type: sh\n    script: "true"\n    depends: [a]\n',
    );
    const cycled = await owner.run("flow", "submit", contextId, cycle, "--start");
    expectOneErrorLine(
      cycled,
      1,
      new RegExp(`^flowc: ${cycle}:5: jobs\\.0\\.depends \\(job "a"\\): the jobs form a dependency cycle: a → b → a`),
    );
    expect(cycled.stdout).toBe("");

    const wrong = file(
      "wrong.yaml",
      'jobs:\n  - name: a\n    script_type: ruby\n    script: "true"\n    timeout: -1\n    dependss: []\n',
    );
    const refused = await owner.run("flow", "submit", contextId, wrong);
    expect(refused.code).toBe(1);
    expect(refused.errors).toEqual([
      `flowc: ${wrong}: the coordinator refused the flow (3 problems):`,
      expect.stringMatching(new RegExp(`^ {2}${wrong}:3: jobs\\.0\\.script_type \\(job "a"\\): Invalid option`)),
      // The unit a number's name does not say, and the field a typo most likely meant.
      expect.stringMatching(
        new RegExp(`^ {2}${wrong}:5: jobs\\.0\\.timeout \\(job "a"\\): Too small.* \\(timeout is in seconds\\)$`),
      ),
      `  ${wrong}:6: jobs.0.dependss (job "a"): Unrecognized key: "dependss" (did you mean "depends"?)`,
    ]);
    expectOneErrorLine(
      await owner.run("flow", "submit", contextId, path.join(owner.home, "missing.yaml")),
      1,
      /cannot read the flow file .*missing\.yaml: no such file/,
    );
    expect((await owner.run("flow", "list", contextId)).stdout).toBe(`no flows in context ${contextId}\n`); // nothing refused was stored
  });
});
