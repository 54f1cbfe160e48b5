import { describe, expect, it } from "vitest";
import {
  formatPushRunners,
  parsePushRunners,
  pushRunnersOf,
  PUSH_RUNNERS_NAMED,
} from "../../shared/store/push-runners.js";

// The push runners a dispatcher names in the context hash (`push_runners`): what a submission's
// reservation reads back is only ever a list of candidates, and anything else reads as none.

describe("the push runners a dispatcher names", () => {
  it("read back as written, at most PUSH_RUNNERS_NAMED of them", () => {
    const runners = Array.from({ length: 20 }, (_, i) => ({ id: i + 1, scriptTypes: ["sh" as const] }));
    const read = parsePushRunners(formatPushRunners(runners));
    expect(read).toHaveLength(PUSH_RUNNERS_NAMED);
    expect(read[0]).toEqual({ id: 1, scriptTypes: ["sh"] });
    expect(parsePushRunners(formatPushRunners([]))).toEqual([]);
  });

  it("read as none when the field is missing, not JSON, or not a list of [id, script types]", () => {
    for (const raw of [null, undefined, "", "{", '{"a":1}', '[[0,["sh"]]]', '[[1,["cobol"]]]', '[["1",["sh"]]]'])
      expect(parsePushRunners(raw), String(raw)).toEqual([]);
  });

  it("are the runners with an address, with their script types", () => {
    const list = [
      { id: 1, address: "https://r1.example/", script_types: ["sh" as const] },
      { id: 2, address: "", script_types: ["sh" as const] },
      { id: 3, address: "https://r3.example/", script_types: ["python" as const, "sh" as const] },
    ];
    expect(pushRunnersOf(list)).toEqual([
      { id: 1, scriptTypes: ["sh"] },
      { id: 3, scriptTypes: ["python", "sh"] },
    ]);
  });
});
