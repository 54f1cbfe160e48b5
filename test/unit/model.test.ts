import { describe, expect, it } from "vitest";
import {
  Address,
  FlowStatus,
  JobInput,
  JobStatus,
  MessageFormatType,
  MessageStatus,
  MessageType,
  PublicKey,
  RunnerType,
  ScriptType,
  queueSuffix,
} from "../../shared/model/index.js";

const KEY = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

describe("enums match the seeds (plus sh)", () => {
  it.each([
    [ScriptType, ["osis", "sal", "v", "python", "sh"]],
    [RunnerType, ["v", "python", "osis", "rust", "sh"]],
    [JobStatus, ["dispatched", "waiting_for_prerequisites", "started", "error", "finished"]],
    [FlowStatus, ["dispatched", "started", "error", "finished"]],
    [MessageType, ["job", "chat", "mail"]],
    [MessageFormatType, ["html", "text", "md"]],
    [MessageStatus, ["dispatched", "acknowledged", "error", "processed"]],
  ] as const)("%#", (schema, values) => {
    expect(schema.options).toEqual(values);
  });

  it("names queues by script type", () => {
    expect(queueSuffix("python")).toBe("python");
  });
});

describe("JobInput", () => {
  it("fills defaults and accepts depends as an alias of dependends", () => {
    const job = JobInput.parse({ script: "echo hi", script_type: "sh", depends: [1, 2] });
    expect(job).toEqual({
      script: "echo hi",
      script_type: "sh",
      timeout: 300,
      retries: 0,
      env_vars: {},
      prerequisites: [],
      dependends: [1, 2],
    });
    expect(JobInput.parse({ script: "x", script_type: "python", dependends: [3] }).dependends).toEqual([3]);
  });

  it("refuses both spellings at once, naming depends", () => {
    const result = JobInput.safeParse({ script: "x", script_type: "sh", depends: [1], dependends: [1] });
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["depends"]);
  });

  it("names the field at fault", () => {
    const bad = JobInput.safeParse({ script: "x", script_type: "perl", env_vars: { "1BAD": "v" } });
    expect(bad.error?.issues.map((i) => i.path.join("."))).toEqual(["script_type", "env_vars.1BAD"]);
    expect(JobInput.safeParse({ script: "x", script_type: "sh", unknown: 1 }).success).toBe(false);
  });
});

describe("identity fields", () => {
  it("takes Ed25519 public keys as 43 base64url characters only", () => {
    expect(PublicKey.safeParse(KEY).success).toBe(true);
    expect(PublicKey.safeParse(`${KEY}=`).success).toBe(false);
    expect(PublicKey.safeParse(KEY.replace("_", "/")).success).toBe(false);
  });

  it("takes https and mycelium addresses", () => {
    expect(Address.safeParse({ type: "https", url: "https://actor.example/inbox" }).success).toBe(true);
    expect(Address.safeParse({ type: "mycelium", address: "4ab:12::1", topic: "t" }).success).toBe(true);
    expect(Address.safeParse({ type: "https", url: "ftp://actor.example" }).success).toBe(false);
    expect(Address.safeParse({ type: "smtp", url: "x" }).success).toBe(false);
  });
});
