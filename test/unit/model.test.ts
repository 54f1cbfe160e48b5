import { describe, expect, it } from "vitest";
import {
  Address,
  FlowStatus,
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

describe("enums match the model (plus sh, skipped, and a flow's unwinding)", () => {
  it.each([
    [ScriptType, ["osis", "sal", "v", "python", "sh"]],
    [RunnerType, ["v", "python", "osis", "rust", "sh"]],
    [JobStatus, ["dispatched", "waiting_for_prerequisites", "started", "error", "finished", "skipped"]],
    [FlowStatus, ["dispatched", "started", "error", "finished", "compensating", "compensated", "compensation_failed"]],
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
