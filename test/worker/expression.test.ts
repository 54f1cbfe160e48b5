import { describe, expect, it } from "vitest";
import { checkCondition, evaluateCondition, type ConditionVars } from "../../shared/flow/expression.js";

// The `when:` conditions inside workerd, where code generation from strings is refused: the CEL
// library interprets its own syntax tree, so the coordinator's Durable Objects can evaluate them.

const vars: ConditionVars = {
  deps: { check: { approved: "yes" }, count: { n: "12" } },
  status: { check: "finished", build: "error" },
  env: { deploy: "true" },
};

describe("conditions inside workerd", () => {
  it("runs where eval is refused, and never generates code", () => {
    expect(navigator.userAgent).toBe("Cloudflare-Workers");
    // eval reached indirectly, so that it is the global one and no bundler rewrites it.
    const globalEval = (globalThis as { eval: (code: string) => unknown }).eval;
    expect(() => globalEval("1")).toThrow(/Code generation from strings disallowed/);
    // The test pool lets `new Function` through (vitest needs it): trap it while conditions
    // (new ones, so parsed here and not taken from the cache) are checked and evaluated.
    const generated: string[] = [];
    const pooled = globalThis.Function;
    globalThis.Function = new Proxy(pooled, {
      construct: (_target, args: string[]) => {
        generated.push(String(args.at(-1)));
        throw new Error("code generation");
      },
      apply: (_target, _this, args: string[]) => {
        generated.push(String(args.at(-1)));
        throw new Error("code generation");
      },
    });
    try {
      expect(checkCondition('deps.check.approved.startsWith("y") && size(status) == 2')).toBeUndefined();
      expect(evaluateCondition('int(deps.count.n) * 2 == 24 && status.check != "error"', vars)).toEqual({
        value: true,
      });
      expect(evaluateCondition('deps.count.n == "1" + "2" ? true : false', vars)).toEqual({ value: true });
    } finally {
      globalThis.Function = pooled;
    }
    expect(generated).toEqual([]);
  });

  it("gives the documented examples", () => {
    expect(evaluateCondition('deps.check.approved == "yes"', vars)).toEqual({ value: true });
    expect(evaluateCondition('status.build == "error"', vars)).toEqual({ value: true });
    expect(evaluateCondition("int(deps.count.n) > 10", vars)).toEqual({ value: true });
    expect(evaluateCondition('"deploy" in env && env.deploy == "true"', vars)).toEqual({ value: true });
    expect(evaluateCondition('"deploy" in env', { ...vars, env: {} })).toEqual({ value: false });
    expect(evaluateCondition('timestamp("2024-12-31T23:30:00Z").getHours() == 23', vars)).toEqual({ value: true });
  });

  it("checks, and turns errors into messages, as in Node", () => {
    expect(checkCondition('deps.check.approved == "yes"')).toBeUndefined();
    expect(checkCondition("deps.check.approved ==")).toBe("Unexpected token: EOF (at character 23)");
    expect(checkCondition("deps.count.n > 10")).toBe("no such overload: string > int (at character 1)");
    expect(checkCondition('env.x.matches("(a+)+$")')).toMatch(/^matches\(\) is not available/);
    expect(evaluateCondition('deps.check.nope == "x"', vars)).toEqual({ error: "No such key: nope (at character 12)" });
    expect(evaluateCondition("int(deps.check.approved) > 1", vars)).toEqual({
      error: "int() type error: cannot convert to int (at character 1)",
    });
    expect(evaluateCondition("dyn(deps.check.approved)", vars)).toEqual({
      error: "the expression gave 'yes' (a string), not true or false",
    });
  });
});
