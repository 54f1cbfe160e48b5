import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import {
  checkCondition,
  evaluateCondition,
  EXPRESSION_LIMITS,
  type ConditionVars,
} from "../../shared/flow/expression.js";

// A job's `when:` condition (CEL through @marcbachmann/cel-js): what checkCondition refuses at
// submission and says why, what evaluateCondition gives (a bool, or an error, never a throw),
// the limits that bound its cost, and that it reads neither the clock nor randomness.

const vars: ConditionVars = {
  deps: { check: { approved: "yes", note: "ok, fine" }, count: { n: "12" }, quiet: {} },
  status: { check: "finished", count: "finished", build: "error", lint: "skipped" },
  env: { deploy: "true", REGION: "eu" },
};

const value = (source: string, with_: ConditionVars = vars) => evaluateCondition(source, with_);

describe("evaluateCondition", () => {
  it("gives the documented examples", () => {
    expect(value('deps.check.approved == "yes"')).toEqual({ value: true });
    expect(value('status.build == "error"')).toEqual({ value: true });
    expect(value("int(deps.count.n) > 10")).toEqual({ value: true });
    expect(value('"deploy" in env && env.deploy == "true"')).toEqual({ value: true });
    expect(value('"deploy" in env && env.deploy == "true"', { ...vars, env: {} })).toEqual({ value: false });
    expect(value('has(deps.check.note) && deps.check.note.startsWith("ok")')).toEqual({ value: true });
    expect(value("has(deps.quiet.note)")).toEqual({ value: false });
  });

  it("has CEL's operators and the string functions", () => {
    expect(value('status.lint == "skipped" || status.build == "finished"')).toEqual({ value: true });
    expect(value('!(status.check != "finished") && size(status) == 4')).toEqual({ value: true });
    expect(value('int(deps.count.n) % 5 == 2 ? env.REGION == "eu" : false')).toEqual({ value: true });
    expect(value('"ok" in deps.check.note.split(", ") && deps.check.note.contains("fine")')).toEqual({ value: true });
    expect(value('deps.check.approved.upperAscii() == "YES" && deps.check.approved.substring(1) == "es"')).toEqual({
      value: true,
    });
    expect(value('double(deps.count.n) / 8.0 == 1.5 && deps["check"]["approved"] == "yes"')).toEqual({ value: true });
  });

  it("turns runtime errors into the library's message with where, never a throw", () => {
    expect(value('deps.check.nope == "x"')).toEqual({ error: "No such key: nope (at character 12)" });
    expect(value('deps.gone.x == "x"')).toEqual({ error: "No such key: gone (at character 6)" });
    expect(value("int(deps.check.approved) > 1")).toEqual({
      error: "int() type error: cannot convert to int (at character 1)",
    });
    expect(value("int(deps.count.n) / 0 == 1")).toEqual({ error: "division by zero (at character 1)" });
    // Keys of Object.prototype are no keys of a map.
    expect(value('env.constructor == "x"')).toEqual({ error: "No such key: constructor (at character 5)" });
    expect(value('"constructor" in env || "__proto__" in deps')).toEqual({ value: false });
  });

  it("says what a result that is not a bool was", () => {
    expect(value("dyn(deps.check.approved)")).toEqual({
      error: "the expression gave 'yes' (a string), not true or false",
    });
    expect(value("dyn(int(deps.count.n))")).toEqual({ error: "the expression gave 12 (an int), not true or false" });
    expect(value("dyn(deps.check.note.split(','))")).toEqual({
      error: "the expression gave a list, not true or false",
    });
    expect(value("dyn(deps.check)")).toEqual({ error: "the expression gave a map, not true or false" });
    expect(value("dyn(1.5)")).toEqual({ error: "the expression gave 1.5 (a double), not true or false" });
    expect(value("dyn(null)")).toEqual({ error: "the expression gave null, not true or false" });
    expect(value(`dyn("${"a".repeat(50)}")`)).toEqual({
      error: `the expression gave '${"a".repeat(40)}…' (a string), not true or false`,
    });
  });

  it("answers an invalid condition as checkCondition does, without evaluating it", () => {
    expect(value("deps.check.approved ==")).toEqual({ error: checkCondition("deps.check.approved ==") });
  });

  it("never throws, whatever the text", () => {
    const token = fc.constantFrom(
      ...["deps", "status", "env", ".", "check", "approved", "(", ")", "[", "]", "{", "}", ",", ":", "?"],
      ...["==", "!=", "<", "+", "-", "*", "/", "%", "&&", "||", "!", "in", '"yes"', "'", "1", "0", "1.5", "1u"],
      ...["int", "size", "has", "dyn", "timestamp", "exists", "matches", "cel", "bind", "x", "null", "true", " "],
    );
    const sources = fc.oneof(
      fc.string({ maxLength: 60 }),
      fc.array(token, { maxLength: 30 }).map((t) => t.join("")),
    );
    fc.assert(
      fc.property(sources, (source) => {
        const out = evaluateCondition(source, vars);
        expect("value" in out ? typeof out.value : typeof out.error).toMatch(/^(boolean|string)$/);
        expect(checkCondition(source) === undefined || "error" in out).toBe(true);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("checkCondition", () => {
  it("accepts a valid condition", () => {
    expect(checkCondition('deps.check.approved == "yes"')).toBeUndefined();
    expect(checkCondition('timestamp(env.AT) < timestamp("2030-01-01T00:00:00Z")')).toBeUndefined();
    expect(checkCondition("dyn(env.x)")).toBeUndefined(); // dyn: known once evaluated
  });

  it("says where a syntax error is", () => {
    expect(checkCondition("deps.check.approved ==")).toBe("Unexpected token: EOF (at character 23)");
    expect(checkCondition('status.build == "error')).toMatch(/^Unterminated string.* \(at character 17\)$/);
    expect(checkCondition('"\\q" == env.x')).toBe("Invalid escape sequence: \\q (at character 2)");
  });

  it("names an unknown variable and the ones there are", () => {
    expect(checkCondition('dep.check.approved == "yes"')).toBe(
      "Unknown variable: dep (at character 1); a condition has deps, status, env and inputs",
    );
  });

  it("refuses a type mismatch, and a result that is not a bool", () => {
    // Every value is a string: comparing one with a number is an error, not false.
    expect(checkCondition("deps.count.n > 10")).toBe("no such overload: string > int (at character 1)");
    expect(checkCondition("env.deploy == true")).toBe("no such overload: string == bool (at character 1)");
    expect(checkCondition("deps.check.approved")).toBe("the expression gives a string, not true or false");
    expect(checkCondition("int(deps.count.n) + 1")).toBe("the expression gives an int, not true or false");
    expect(checkCondition("env")).toBe("the expression gives a map<string, string>, not true or false");
  });

  it("refuses what could loop, backtrack or blow up, saying why", () => {
    expect(checkCondition('deps.check.note.split(",").exists(p, p == "ok")')).toBe(
      "exists() is not available: a condition has no loops (its cost would be the product of its inputs' sizes) (at character 28)",
    );
    for (const macro of ["all", "exists_one", "filter", "map"])
      expect(checkCondition(`env.x.split(",").${macro}(p, p == "ok")`)).toMatch(
        `${macro}() is not available: a condition has no loops`,
      );
    expect(checkCondition('env.x.matches("(a+)+$")')).toMatch(/^matches\(\) is not available: .*regular expressions/);
    expect(checkCondition("cel.bind(a, env.x, a == env.x)")).toMatch(/^bind\(\) is not available/);
    expect(checkCondition('env.x.split("").join(env.x) == ""')).toMatch(/^join\(\) is not available/);
    expect(checkCondition('frob(env.x) == ""')).toBe(
      "frob() is not available: it is not one of the functions a condition may call (at character 1)",
    );
    expect(checkCondition('env.x.constructor() == ""')).toMatch(/^constructor\(\) is not available/);
    // Deep inside a list or a map literal too.
    expect(checkCondition('[true, {"a": env.x.matches("a")}["a"]][0]')).toMatch(/^matches\(\)/);
  });

  it("refuses the timestamp readings that depend on the host's time zone", () => {
    expect(checkCondition('timestamp(env.AT).getHours() == 0 && duration("1h").getMinutes() == 60')).toBeUndefined();
    expect(checkCondition('timestamp(env.AT).getHours("Europe/Paris") == 0')).toBe(
      "getHours() takes no arguments in a condition (at character 19)",
    );
    expect(checkCondition("timestamp(env.AT).getDayOfYear() == 1")).toMatch(/^getDayOfYear\(\) is not available/);
  });
});

describe("the limits", () => {
  it("bound the source in UTF-8 bytes", () => {
    const padded = (n: number, ch = " ") => `true${ch === " " ? "" : " ||"}${ch.repeat(n)}`;
    expect(checkCondition(padded(EXPRESSION_LIMITS.sourceBytes - 4))).toBeUndefined();
    expect(checkCondition(padded(EXPRESSION_LIMITS.sourceBytes - 3))).toBe("the expression is over 1024 bytes");
    // 400 characters, 800 bytes in a string literal: within; 520 characters (1,040 bytes): over.
    expect(checkCondition(`env.x == "${"é".repeat(400)}"`)).toBeUndefined();
    expect(checkCondition(`env.x == "${"é".repeat(520)}"`)).toBe("the expression is over 1024 bytes");
    expect(evaluateCondition("x".repeat(100_000), vars)).toEqual({ error: "the expression is over 1024 bytes" });
  });

  it("bound the parts, the nesting and the literals", () => {
    const sum = (n: number) => `${Array.from({ length: n }, () => "1").join(" + ")} > 0`;
    expect(checkCondition(sum(49))).toBeUndefined(); // 49 values, 48 +, one > and its 0: 99 parts
    expect(checkCondition(sum(51))).toBe("the expression has more than 100 parts");
    expect(checkCondition(`${"(".repeat(40)}true${")".repeat(40)}`)).toBe("the expression nests more than 32 deep");
    const list = (n: number) => `size([${Array.from({ length: n }, (_, i) => i).join(",")}]) > 0`;
    expect(checkCondition(list(32))).toBeUndefined();
    expect(checkCondition(list(33))).toBe("a list has more than 32 elements");
  });

  it("keep a condition at its limits over the largest inputs to milliseconds", () => {
    const big = "\u4e00".repeat(40_000); // 120 KiB of UTF-8
    const heavy: ConditionVars = { deps: { a: { v: big } }, status: {}, env: { b: big } };
    const sum = (n: number) => Array.from({ length: n }, (_, i) => (i % 2 ? "env.b" : "deps.a.v")).join(" + ");
    // Nearly 100 parts: a 2.2 MB string split into 1.1 million, and a 0.9 MB one scanned.
    const source = `(${sum(18)}).split("").size() > 0 && !(${sum(8)}).contains("zz")`;
    expect(checkCondition(source)).toBeUndefined();
    const start = performance.now();
    expect(evaluateCondition(source, heavy)).toEqual({ value: true });
    expect(performance.now() - start).toBeLessThan(2_000); // about 60 ms; what was refused took a minute
  });
});

describe("determinism", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  const sources = [
    'timestamp(env.AT) < timestamp("2030-01-01T00:00:00Z")',
    "timestamp(env.AT).getFullYear() == 2024 && timestamp(env.AT).getHours() == 23",
    'timestamp(env.AT) + duration("2h") > timestamp("2024-12-31T23:59:59Z")',
    "int(deps.count.n) > 10 && size(env) == 1",
    'dyn(status) == {"check": "finished"}',
  ];
  const timed: ConditionVars = {
    deps: { count: { n: "12" } },
    status: { check: "finished" },
    env: { AT: "2024-12-31T23:30:00Z" },
  };

  it("gives the same at any time: nothing reads the clock, and CEL has no now()", () => {
    const now = sources.map((s) => evaluateCondition(s, timed));
    expect(now).toEqual([{ value: true }, { value: true }, { value: true }, { value: true }, { value: true }]);
    vi.useFakeTimers({ now: new Date("2061-07-28T03:00:00Z") });
    expect(sources.map((s) => evaluateCondition(s, timed))).toEqual(now);
    expect(checkCondition("now() > timestamp(0)")).toMatch(/^now\(\) is not available/);
  });

  it("gives the same from the cache as when parsed, after the cache turned over", () => {
    const first = sources.map((s) => evaluateCondition(s, timed));
    for (let i = 0; i < EXPRESSION_LIMITS.cachedPrograms + 10; i++)
      expect(evaluateCondition(`int(deps.count.n) == ${i}`, timed)).toEqual({ value: i === 12 });
    expect(sources.map((s) => evaluateCondition(s, timed))).toEqual(first);
    expect(sources.map((s) => evaluateCondition(s, timed))).toEqual(first);
  });
});
