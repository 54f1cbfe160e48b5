import { describe, expect, it } from "vitest";
import { createdChange, flowChange } from "../../shared/flow/changes.js";
import { FlowSubmission, TemplateFile } from "../../shared/flow/index.js";
import {
  FLOW_IDENTITY_LIMITS,
  flowTrigger,
  identityOf,
  labelsText,
  matchesFilters,
  parseLabelFilter,
  triggerText,
} from "../../shared/model/index.js";
import { flowRecord } from "../../shared/store/flow-records.js";
import { flowOf, jobIn } from "./flow-sim.js";

// A flow's identity (docs/flows.md, "Names, labels and triggers"): what a submission may give,
// how lists filter on it, how its trigger is told, and that its record and created event keep it.

const job = { name: "a", script_type: "sh" as const, script: "true" };
/** The issues a submission with these fields gets, as `path: message`. */
function issues(fields: Record<string, unknown>): string[] {
  const parsed = FlowSubmission.safeParse({ jobs: [job], ...fields });
  return parsed.success ? [] : parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`);
}

describe("a flow's name and labels at the edge", () => {
  it("takes a name and a few labels, in a submission and in a template's file", () => {
    expect(issues({ name: "nightly build", labels: { env: "prod", "team.io/owner": "data platform" } })).toEqual([]);
    const template = TemplateFile.safeParse({ jobs: [job], name: "report", labels: { kind: "report" } });
    expect(template.success).toBe(true);
  });

  it("refuses a name that is empty, too long, on several lines or padded, saying the limit", () => {
    const max = FLOW_IDENTITY_LIMITS.nameChars;
    expect(issues({ name: "" })).toEqual(["name: a flow's name is not empty"]);
    expect(issues({ name: "x".repeat(max) })).toEqual([]);
    expect(issues({ name: "x".repeat(max + 1) })).toEqual([`name: a flow's name is at most ${max} characters`]);
    expect(issues({ name: "two\nlines" })).toEqual(["name: a flow's name is one line: no control characters"]);
    expect(issues({ name: " padded" })).toEqual(["name: a flow's name neither starts nor ends with a space"]);
  });

  it("refuses too many labels, a key that is not one, and a value too long, naming the label", () => {
    const many = Object.fromEntries(Array.from({ length: FLOW_IDENTITY_LIMITS.labels + 1 }, (_, i) => [`k${i}`, "v"]));
    expect(issues({ labels: many })).toEqual([`labels: a flow has at most ${FLOW_IDENTITY_LIMITS.labels} labels`]);
    expect(issues({ labels: { "-bad": "v" } })).toEqual([
      "labels.-bad: a label's key: letters, digits and _ . / -, starting and ending with a letter or digit",
    ]);
    expect(issues({ labels: { ["k".repeat(64)]: "v" } })[0]).toMatch(/at most 63 characters/);
    expect(issues({ labels: { env: "v".repeat(129) } })).toEqual([
      "labels.env: a label's value is at most 128 characters",
    ]);
    expect(issues({ labels: { env: "a\tb" } })).toEqual([
      "labels.env: a label's value is one line: no control characters",
    ]);
    expect(issues({ labels: "env=prod" })[0]).toMatch(/^labels: /);
  });
});

describe("list filters", () => {
  it("reads key:value and key alone, the first colon splitting, and refuses what is not a filter", () => {
    expect(parseLabelFilter("env:prod")).toEqual({ key: "env", value: "prod" });
    expect(parseLabelFilter("url:http://x")).toEqual({ key: "url", value: "http://x" });
    expect(parseLabelFilter("env:")).toEqual({ key: "env", value: "" });
    expect(parseLabelFilter("env")).toEqual({ key: "env" });
    expect(parseLabelFilter(":prod")).toBeUndefined();
    expect(parseLabelFilter("a b:c")).toBeUndefined();
    expect(parseLabelFilter(`env:${"v".repeat(129)}`)).toBeUndefined();
  });

  it("matches a part of the name whatever its case, and every label asked for", () => {
    const flow = { name: "Nightly Report", labels: { env: "prod", team: "data" } };
    expect(matchesFilters(flow, {})).toBe(true);
    expect(matchesFilters(flow, { name: "nightly" })).toBe(true);
    expect(matchesFilters(flow, { name: "weekly" })).toBe(false);
    expect(matchesFilters({}, { name: "x" })).toBe(false);
    expect(matchesFilters(flow, { labels: [{ key: "env", value: "prod" }, { key: "team" }] })).toBe(true);
    expect(matchesFilters(flow, { labels: [{ key: "env", value: "dev" }] })).toBe(false);
    expect(matchesFilters(flow, { labels: [{ key: "owner" }] })).toBe(false);
    // A key that every object has in JavaScript is no label.
    expect(matchesFilters(flow, { labels: [{ key: "constructor" }] })).toBe(false);
  });
});

describe("triggers", () => {
  it("tells what started a flow: a parent first, then a schedule, then a template, else manual", () => {
    const template = { name: "nightly", version: 4 };
    const parent = { flow_id: 12, job_id: 3, attempt: 1, depth: 1 };
    expect(triggerText(flowTrigger({}))).toBe("manual");
    expect(triggerText(flowTrigger({ template }))).toBe("template nightly v4");
    expect(triggerText(flowTrigger({ template, schedule_id: 3 }))).toBe("schedule 3");
    expect(triggerText(flowTrigger({ template, parent }))).toBe("parent flow 12");
    expect(flowTrigger({ parent })).toEqual({ kind: "parent", flow_id: 12, job_id: 3 });
  });

  it("writes labels sorted by key, and keeps no empty part of an identity", () => {
    expect(labelsText({ team: "data", env: "prod" })).toBe("env=prod team=data");
    expect(labelsText(undefined)).toBe("");
    expect(identityOf({ name: undefined, labels: {}, schedule_id: undefined })).toBeUndefined();
    expect(identityOf({ name: "n", labels: {} })).toEqual({ name: "n" });
  });
});

describe("a flow's record and stream keep its identity", () => {
  const identity = { name: "nightly", labels: { env: "prod" }, schedule_id: 3 };
  const state = { ...flowOf([jobIn({ name: "a" })]), identity };

  it("writes the name, labels and schedule on the record, and nothing for a flow without them", () => {
    expect(flowRecord(state, 1_700_000_000_000)).toMatchObject(identity);
    const plain = flowRecord(flowOf([jobIn({ name: "a" })]), 1_700_000_000_000);
    expect(Object.keys(plain)).not.toContain("name");
    expect(Object.keys(plain)).not.toContain("labels");
  });

  it("tells the name on every flow event, the labels and the trigger on flow.created", () => {
    const created = createdChange(state, 5);
    expect(created).toMatchObject({ type: "flow.created", name: "nightly", labels: { env: "prod" } });
    expect(created.trigger).toEqual({ kind: "schedule", schedule_id: 3 });
    const started = flowChange("flow.started", state, 6);
    expect(started.name).toBe("nightly");
    expect(started.labels).toBeUndefined();
    expect(createdChange(flowOf([jobIn({ name: "a" })]), 5).trigger).toEqual({ kind: "manual" });
  });
});
