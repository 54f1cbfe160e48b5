import { Environment, type ASTNode, type ParseResult } from "@marcbachmann/cel-js";
import { Duration, UnsignedInt } from "@marcbachmann/cel-js/evaluator";

/**
 * A job's `when:` condition: an expression in CEL, the Common Expression Language
 * (https://cel.dev), read by the maintained `@marcbachmann/cel-js`, which interprets its own AST
 * (no `eval`, no `new Function`: workerd forbids both). The job runs when it gives `true`.
 *
 * Its variables, all of them maps of strings:
 * - `deps.<job>.<key>`: a dependency's result value, by the dependency's key (its name, or its id
 *   when unnamed) as in `FLOW_INPUTS`; a dependency without a result has an empty map;
 * - `status.<job>`: how a dependency ended: `"finished"`, `"error"` or `"skipped"`;
 * - `env.<NAME>`: the job's environment, the flow's `env_vars` overridden by the job's own;
 * - `inputs.<name>`: a flow template's inputs, the environment's `INPUT_<NAME>` variables by the
 *   input's lower-case name (inputs.ts; empty for a flow without any).
 *
 * Examples:
 * - `deps.check.approved == "yes"`
 * - `status.build == "error"`
 * - `int(deps.count.n) > 10` (values are strings: `deps.count.n > 10` is a type error)
 * - `"deploy" in env && env.deploy == "true"`
 * - `has(deps.check.note) && deps.check.note.startsWith("ok")` (a key that may be missing)
 *
 * A key that is not there is an error when the condition is evaluated (`No such key: nope`), not
 * false; `in` and `has()` test for one first.
 *
 * Cost: a condition has no loops. CEL's macros that iterate (`all`, `exists`, `exists_one`,
 * `map`, `filter`) and `cel.bind` are refused: their body runs once per element, so the cost is
 * the product of sizes, not their sum (over one 120 KiB input, a body that scans it took a
 * minute). `matches` is refused too (JavaScript's regular expressions backtrack: `(a+)+$`
 * took 2 s on 25 characters), and `join` (its separator is copied once per element). What is
 * left is linear in its operands, so a condition of at most `EXPRESSION_LIMITS.astNodes` parts
 * over inputs bounded elsewhere (120 KiB of results, 128 KiB of env) costs milliseconds.
 * Deterministic: nothing reads the clock or a random source (CEL has no `now()`), and the
 * timestamp readings that take a time zone (the host's time zone data) are refused.
 */

/** What bounds a condition's size and so its cost (see above). */
export const EXPRESSION_LIMITS = {
  /** The expression's text, in UTF-8 bytes. */
  sourceBytes: 1024,
  /** Parts of its syntax tree (names, values, operators, calls): 4× a busy real condition. */
  astNodes: 100,
  /** How deep calls, selections, indexes and literals may nest. */
  depth: 32,
  /** Elements of a list literal, entries of a map literal. */
  literalElements: 32,
  /** Arguments of one call (the most any available function takes is 2). */
  callArguments: 4,
  /** Parsed conditions kept, so a flow of many jobs with the same `when:` parses it once. */
  cachedPrograms: 256,
} as const;

/** The variables a condition is evaluated with (see above). */
export interface ConditionVars {
  deps: Record<string, Record<string, string>>;
  status: Record<string, string>;
  env: Record<string, string>;
  /** Absent: no inputs (an empty map). */
  inputs?: Record<string, string>;
}

/** The functions a condition may call; each is at most linear in its arguments. */
const FUNCTIONS = new Set([
  "has",
  "size",
  "int",
  "uint",
  "double",
  "string",
  "bool",
  "dyn",
  "type",
  "timestamp",
  "duration",
]);

/**
 * The methods a condition may call, by the most arguments each may take. The timestamp and
 * duration readings are the UTC ones, without a time-zone argument (its forms and
 * `getDayOfYear` go through the host's local time, and workerd and Node may differ).
 */
const METHODS = new Map<string, number>(
  Object.entries({
    size: 0,
    lowerAscii: 0,
    upperAscii: 0,
    trim: 0,
    contains: 1,
    startsWith: 1,
    endsWith: 1,
    indexOf: 2,
    lastIndexOf: 2,
    substring: 2,
    split: 2,
    getDate: 0,
    getDayOfMonth: 0,
    getDayOfWeek: 0,
    getFullYear: 0,
    getMonth: 0,
    getHours: 0,
    getMinutes: 0,
    getSeconds: 0,
    getMilliseconds: 0,
  }),
);

const LOOP = "a condition has no loops (its cost would be the product of its inputs' sizes)";

/** Why the calls people will try are refused (a Map: a name like `constructor` finds nothing). */
const REFUSED = new Map<string, string>([
  ["all", LOOP],
  ["exists", LOOP],
  ["exists_one", LOOP],
  ["map", LOOP],
  ["filter", LOOP],
  ["bind", "a condition names no values of its own (a bound value could double at every step)"],
  ["matches", "a condition has no regular expressions (JavaScript's can take exponential time)"],
  ["join", "its separator is copied once per element; compare the elements instead"],
  ["getDayOfYear", "it goes through the host's local time; use getMonth() and getDate()"],
]);

/** How the library names a limit it met, as this module says it. */
const LIMIT_WORDS = new Map<string, string>([
  ["maxAstNodes", `the expression has more than ${EXPRESSION_LIMITS.astNodes} parts`],
  ["maxDepth", `the expression nests more than ${EXPRESSION_LIMITS.depth} deep`],
  ["maxListElements", `a list has more than ${EXPRESSION_LIMITS.literalElements} elements`],
  ["maxMapEntries", `a map has more than ${EXPRESSION_LIMITS.literalElements} entries`],
  ["maxCallArguments", `a call has more than ${EXPRESSION_LIMITS.callArguments} arguments`],
]);

let celEnvironment: Environment | undefined;

/** The one CEL environment: the four variables, the limits; built on first use. */
function environment(): Environment {
  celEnvironment ??= new Environment({
    limits: {
      maxAstNodes: EXPRESSION_LIMITS.astNodes,
      maxDepth: EXPRESSION_LIMITS.depth,
      maxListElements: EXPRESSION_LIMITS.literalElements,
      maxMapEntries: EXPRESSION_LIMITS.literalElements,
      maxCallArguments: EXPRESSION_LIMITS.callArguments,
    },
  })
    .registerVariable("deps", "map<string, map<string, string>>")
    .registerVariable("status", "map<string, string>")
    .registerVariable("env", "map<string, string>")
    .registerVariable("inputs", "map<string, string>");
  return celEnvironment;
}

/** Where in the source a node or error is, for people: 1-based, in characters. */
function at(start: number): string {
  return ` (at character ${start + 1})`;
}

/** A library error (parse, type or evaluation) or any other, as one line with its position. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cel = error as Error & { code?: string; summary?: string; range?: { start: number } };
  const summary = cel.summary ?? error.message;
  if (cel.code === "limit_exceeded") {
    const limit = /Exceeded (\w+)/.exec(summary)?.[1] ?? "";
    return LIMIT_WORDS.get(limit) ?? summary;
  }
  const where = cel.range ? at(cel.range.start) : "";
  const hint = cel.code === "unknown_variable" ? "; a condition has deps, status, env and inputs" : "";
  return `${summary}${where}${hint}`;
}

function isNode(value: unknown): value is ASTNode {
  return typeof value === "object" && value !== null && typeof (value as { op?: unknown }).op === "string";
}

/** Why a call is not available in a condition, or undefined when it is. */
function callRefusal(node: ASTNode & { op: "call" | "rcall" }): string | undefined {
  const [name] = node.args;
  if (node.op === "call" && FUNCTIONS.has(name)) return undefined;
  const most = node.op === "rcall" ? METHODS.get(name) : undefined;
  if (node.op === "rcall" && most !== undefined && node.args[2].length <= most) return undefined;
  // A method's name comes after its receiver (which is where the node starts).
  const where = node.op === "rcall" ? node.input.indexOf(name, node.args[1].end) : node.start;
  if (most !== undefined)
    return `${name}() takes ${most === 0 ? "no arguments" : `at most ${most}`} in a condition${at(where)}`;
  const why = REFUSED.get(name) ?? "it is not one of the functions a condition may call";
  return `${name}() is not available: ${why}${at(where)}`;
}

/** Why a call in the tree is not available in a condition, or undefined when every one is. */
function refusal(node: ASTNode): string | undefined {
  if (node.op === "value" || node.op === "id") return undefined;
  if (node.op === "call" || node.op === "rcall") {
    const why = callRefusal(node);
    if (why) return why;
  }
  // Children sit in args as one node (a unary operator's), or in arrays of nodes and names, or of
  // map entries ([key, value] pairs).
  const args: unknown = node.args;
  const children = Array.isArray(args) ? (args as unknown[]).flat(2).filter(isNode) : isNode(args) ? [args] : [];
  for (const child of children) {
    const why = refusal(child);
    if (why) return why;
  }
  return undefined;
}

/** A CEL type's name as a sentence says it: "a string", "an int", "a list<string>". */
function typeWords(type: string): string {
  const name = type.replace(/^google\.protobuf\./, "").toLowerCase();
  return `${/^int\b/.test(name) ? "an" : "a"} ${name}`;
}

/** A value a condition gave, for a message: `'abc' (a string)`, `12 (an int)`, `a list`. */
function valueWords(value: unknown): string {
  if (typeof value === "string") {
    const shown = value.length > 40 ? `${value.slice(0, 40)}…` : value;
    return `'${shown}' (a string)`;
  }
  if (typeof value === "bigint") return `${value} (an int)`;
  if (typeof value === "number") return `${value} (a double)`;
  if (value instanceof UnsignedInt) return `${value.valueOf()}u (a uint)`;
  if (value instanceof Duration) return `${value.toString()} (a duration)`;
  if (value instanceof Date) return `${value.toISOString()} (a timestamp)`;
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return "a list";
  if (value instanceof Uint8Array) return "bytes";
  if (value instanceof Map || Object.getPrototypeOf(value) === Object.prototype) return "a map";
  return "a value of another type";
}

type Compiled = { program: ParseResult } | { error: string };

/** Parses, refuses what is not available, and type-checks: a program that gives a bool. */
function compileUncached(source: string): Compiled {
  let program: ParseResult;
  try {
    program = environment().parse(source);
  } catch (error) {
    return { error: describe(error) };
  }
  const refused = refusal(program.ast);
  if (refused) return { error: refused };
  const checked = program.check();
  if (!checked.valid) return { error: describe(checked.error) };
  // dyn (dyn(x), mixed branches) is known only once evaluated: evaluateCondition says then.
  if (checked.type !== "bool" && checked.type !== "dyn")
    return { error: `the expression gives ${typeWords(checked.type ?? "dyn")}, not true or false` };
  return { program };
}

/** Recently compiled conditions, oldest first (a hit moves to the end): a bounded LRU. */
const cache = new Map<string, Compiled>();

/** `source` compiled, from the cache when it is there; too long a source is never parsed. */
function compile(source: string): Compiled {
  // A UTF-16 unit is at least one UTF-8 byte: a long string is refused before it is encoded.
  if (source.length > EXPRESSION_LIMITS.sourceBytes || utf8Bytes(source) > EXPRESSION_LIMITS.sourceBytes)
    return { error: `the expression is over ${EXPRESSION_LIMITS.sourceBytes} bytes` };
  const cached = cache.get(source);
  if (cached) {
    cache.delete(source);
    cache.set(source, cached);
    return cached;
  }
  const compiled = compileUncached(source);
  if (cache.size >= EXPRESSION_LIMITS.cachedPrograms) cache.delete(cache.keys().next().value as string);
  cache.set(source, compiled);
  return compiled;
}

const encoder = new TextEncoder();

function utf8Bytes(text: string): number {
  return encoder.encode(text).length;
}

/**
 * Why `source` is not a valid condition — a syntax error and where, an unknown variable, a call
 * that is not available, a result that is not a bool, too long or too big — or undefined when it
 * is. For submission, which answers 400 naming the field.
 */
export function checkCondition(source: string): string | undefined {
  const compiled = compile(source);
  return "error" in compiled ? compiled.error : undefined;
}

/**
 * What `source` gives with `vars`: true or false, or why it gave neither — an invalid condition
 * (as checkCondition says), an evaluation error (a missing key, a failed conversion, a type
 * mismatch: the library's message and where), or a value that is not a bool. Never throws; pure.
 */
export function evaluateCondition(source: string, vars: ConditionVars): { value: boolean } | { error: string } {
  const compiled = compile(source);
  if ("error" in compiled) return { error: compiled.error }; // not the cache's own object
  let value: unknown;
  try {
    value = compiled.program({ deps: vars.deps, status: vars.status, env: vars.env, inputs: vars.inputs ?? {} });
  } catch (error) {
    return { error: describe(error) };
  }
  if (typeof value === "boolean") return { value };
  return { error: `the expression gave ${valueWords(value)}, not true or false` };
}

/**
 * The inputs a valid condition names as `inputs.<name>` or `inputs["<name>"]`, each once: what a
 * flow template's `when` must have declared. A name computed at run time (`inputs[env.X]`) is
 * not known here and is not listed.
 */
export function conditionInputs(source: string): string[] {
  const compiled = compile(source);
  if ("error" in compiled) return [];
  const names = new Set<string>();
  const visit = (node: ASTNode): void => {
    const args: unknown = node.args;
    if ((node.op === "." || node.op === "[]") && Array.isArray(args)) {
      const [target, field] = args as unknown[];
      if (isNode(target) && target.op === "id" && target.args === "inputs") {
        if (typeof field === "string") names.add(field);
        else if (isNode(field) && field.op === "value" && typeof field.args === "string") names.add(field.args);
      }
    }
    const children = Array.isArray(args) ? (args as unknown[]).flat(2).filter(isNode) : isNode(args) ? [args] : [];
    for (const child of children) visit(child);
  };
  visit(compiled.program.ast);
  return [...names];
}
