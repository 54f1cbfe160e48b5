import { describe, expect, it } from "vitest";
import { Keys } from "../../shared/keys.js";

/** The hash tag Redis Cluster would hash: the text inside the first {...}. */
function hashTag(key: string): string {
  const open = key.indexOf("{");
  const close = key.indexOf("}", open + 1);
  return open >= 0 && close > open + 1 ? key.slice(open + 1, close) : key;
}

describe("Keys", () => {
  const keys = new Keys();

  it("builds the model's canonical names inside the context namespace", () => {
    expect(keys.actor(12)).toBe("actor:12");
    expect(keys.context(7)).toBe("ctx:{7}:context:7");
    expect(keys.flow(7, 33)).toBe("ctx:{7}:flow:33");
    expect(keys.job(7, 12, 2001)).toBe("ctx:{7}:job:12:2001");
    expect(keys.message(7, 12, 101)).toBe("ctx:{7}:message:12:101");
    expect(keys.runner(7, 20)).toBe("ctx:{7}:runner:20");
    expect(keys.msgOut(7)).toBe("ctx:{7}:msg_out");
    expect(keys.msgIn(7, 12)).toBe("ctx:{7}:msg_in:12");
    expect(keys.queue(7, "python", 3)).toBe("ctx:{7}:queue:python:3");
    expect(keys.pinnedQueue(7, 2, 3)).toBe("ctx:{7}:queue:runner:2:3");
  });

  it("puts every key of a context in one cluster slot", () => {
    const all = [
      keys.context(7),
      keys.flow(7, 1),
      keys.job(7, 1, 2),
      keys.message(7, 1, 2),
      keys.runner(7, 3),
      keys.msgOut(7),
      keys.msgIn(7, 12),
      keys.queue(7, "sh", 1),
      keys.pinnedQueue(7, 3, 1),
      keys.ids(7),
      keys.index(7, "flow"),
    ];
    expect(new Set(all.map(hashTag))).toEqual(new Set(["7"]));
  });

  it("prefixes every key and refuses prefixes that would move the hash tag", () => {
    const prefixed = new Keys("staging:");
    expect(prefixed.actor(1)).toBe("staging:actor:1");
    expect(prefixed.flow(7, 1)).toBe("staging:ctx:{7}:flow:1");
    expect(hashTag(prefixed.flow(7, 1))).toBe("7");
    expect(() => new Keys("a{b}")).toThrow(/braces/);
  });
});
