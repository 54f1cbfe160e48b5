import { parseArgs } from "node:util";
import type { PageQuery } from "../shared/client/index.js";
import { isIdText } from "../shared/model/index.js";
import { UsageError } from "./errors.js";
import type { Output } from "./output.js";

/** One option of a command: how parseArgs reads it, and how `--help` describes it. */
export interface OptionSpec {
  type: "string" | "boolean";
  multiple?: boolean;
  short?: string;
  /** Placeholder of the value in help, e.g. `<file>`. */
  value?: string;
  help: string;
}

export type OptionSpecs = Record<string, OptionSpec>;

/** The options every command accepts; their values reach commands through `Invocation.globals`. */
export const GLOBAL_OPTIONS = {
  url: { type: "string", value: "<url>", help: 'coordinator URL (env FLOWC_URL, profile "url")' },
  "key-file": {
    type: "string",
    value: "<file>",
    help: 'your private key file (env FLOWC_KEY_FILE, profile "key_file")',
  },
  actor: { type: "string", value: "<id>", help: 'your actor id (env FLOWC_ACTOR_ID, profile "actor_id")' },
  profile: {
    type: "string",
    value: "<file>",
    help: "profile file (env FLOWC_PROFILE; default ~/.config/flowc/profile.json)",
  },
  json: { type: "boolean", help: "print the raw JSON answer instead of text" },
  help: { type: "boolean", short: "h", help: "show help (flowc <command> --help for one command)" },
} as const satisfies OptionSpecs;

/** The global options as given on the command line (unset when absent). */
export interface GlobalFlags {
  url?: string;
  keyFile?: string;
  actor?: string;
  profile?: string;
  json: boolean;
}

/** Everything a command needs to run: its parsed arguments, the environment, and where to print. */
export interface Invocation {
  /** The command's own option values, by long name. */
  options: ParsedOptions;
  /** Positional arguments after the command words, checked against `Command.args`. */
  args: string[];
  globals: GlobalFlags;
  env: NodeJS.ProcessEnv;
  cwd: string;
  out: Output;
}

/** A command such as `runner register`. */
export interface Command {
  /** Command words, e.g. `runner register`. */
  name: string;
  summary: string;
  /** What follows `flowc <name>` in the usage line. */
  usage: string;
  /** Names of positional arguments; a trailing `?` marks an optional one. */
  args?: string[];
  options?: OptionSpecs;
  /** Extra paragraphs of help (how options combine, what is saved where). */
  details?: string;
  examples: string[];
  /** Resolves with the exit code when it is not 0 (a watched flow that errored, a runner's own code). */
  run(invocation: Invocation): Promise<void | number>;
}

/** Typed access to parsed option values; a wrong type here is a bug in a command's spec. */
export class ParsedOptions {
  constructor(private readonly values: Record<string, string | boolean | (string | boolean)[] | undefined>) {}

  string(name: string): string | undefined {
    const value = this.values[name];
    return typeof value === "string" ? value : undefined;
  }

  flag(name: string): boolean {
    return this.values[name] === true;
  }

  list(name: string): string[] {
    const value = this.values[name];
    return Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [];
  }
}

/**
 * Parses a command's arguments strictly: unknown options, a missing option value, and too many
 * or too few positionals are usage errors naming the command. Global options are accepted
 * anywhere, so `flowc --json actor show` and `flowc actor show --json` mean the same.
 */
export function parseCommandArgs(
  command: Command,
  argv: string[],
): { options: ParsedOptions; args: string[]; globals: GlobalFlags } {
  const specs: OptionSpecs = { ...GLOBAL_OPTIONS, ...command.options };
  let parsed;
  try {
    parsed = parseArgs({ args: argv, options: toParseArgsOptions(specs), allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError(parseArgsMessage(error), command.name);
  }
  const values = parsed.values as Record<string, string | boolean | (string | boolean)[] | undefined>;
  const options = new ParsedOptions(values);
  const globals = globalFlags(options, command.options ?? {});
  checkPositionals(command, parsed.positionals);
  return { options, args: parsed.positionals, globals };
}

/**
 * Picks the global options out of the parsed values. A command may give a global option's name
 * its own meaning (`runner register --key-file` is the runner's key); then it is not global there.
 */
function globalFlags(options: ParsedOptions, own: OptionSpecs): GlobalFlags {
  const global = (name: string) => (name in own ? undefined : options.string(name));
  const globals: GlobalFlags = { json: options.flag("json") };
  const url = global("url");
  const keyFile = global("key-file");
  const actor = global("actor");
  const profile = global("profile");
  if (url !== undefined) globals.url = url;
  if (keyFile !== undefined) globals.keyFile = keyFile;
  if (actor !== undefined) globals.actor = actor;
  if (profile !== undefined) globals.profile = profile;
  return globals;
}

function checkPositionals(command: Command, positionals: string[]): void {
  const names = command.args ?? [];
  const required = names.filter((n) => !n.endsWith("?"));
  if (positionals.length < required.length) {
    throw new UsageError(`missing argument <${required[positionals.length]}>`, command.name);
  }
  if (positionals.length > names.length) {
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[names.length])}`, command.name);
  }
}

/** parseArgs's own option shape; `exactOptionalPropertyTypes` forbids passing `short: undefined`. */
type ParseArgsOption = { type: "string" | "boolean"; multiple?: boolean; short?: string };

function toParseArgsOptions(specs: OptionSpecs): Record<string, ParseArgsOption> {
  return Object.fromEntries(
    Object.entries(specs).map(([name, spec]) => {
      const option: ParseArgsOption = { type: spec.type };
      if (spec.multiple) option.multiple = true;
      if (spec.short) option.short = spec.short;
      return [name, option];
    }),
  );
}

/**
 * parseArgs's messages are long and suggest `--` for positionals starting with a dash; keep
 * the part that names the problem.
 */
function parseArgsMessage(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: string }).code;
  const option = /'(?:-\w, )?(--?[\w-]+)/.exec(message)?.[1];
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && option) return `unknown option ${option}`;
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && option) {
    if (/argument missing/.test(message)) return `option ${option} needs a value`;
    if (/ambiguous/.test(message))
      return `option ${option} needs a value; write ${option}=<value> for one starting with -`;
    return `option ${option} takes no value`;
  }
  return message.split(". ")[0] ?? message;
}

/** Parses an id (a positive 32-bit integer, as the API's ids are) from an argument or option. */
export function parseId(text: string, what: string, command: string): number {
  if (!isIdText(text))
    throw new UsageError(`${what} must be a positive integer id, not ${JSON.stringify(text)}`, command);
  return Number(text);
}

/**
 * The `<context> <id>` arguments most commands on one object take; `label` names the second in
 * errors (`<flow>`, `<runner>`). The command's `args` guarantee both are present.
 */
export function contextAndId(
  invocation: Invocation,
  label: string,
  command: string,
): { contextId: number; id: number } {
  const [contextText = "", idText = ""] = invocation.args;
  return { contextId: parseId(contextText, "<context>", command), id: parseId(idText, label, command) };
}

/** `text` if it is one of `choices`; otherwise a usage error naming the option (`what`) and the choices. */
export function parseChoice<T extends string>(choices: readonly T[], text: string, what: string, command: string): T {
  if (!(choices as readonly string[]).includes(text))
    throw new UsageError(`${what} must be one of ${choices.join(", ")}, not ${JSON.stringify(text)}`, command);
  return text as T;
}

/**
 * `key=value` pairs of a repeatable option (`option` names it in errors, e.g. `--data`): the
 * value is everything after the first `=` (it may hold `=` itself), and a key given twice is refused.
 */
export function parsePairs(pairs: string[], option: string, command: string): Record<string, string> {
  const out = new Map<string, string>();
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at < 0) throw new UsageError(`${option} takes key=value, not ${JSON.stringify(pair)} (no "=")`, command);
    const key = pair.slice(0, at);
    if (key === "") throw new UsageError(`${option} ${JSON.stringify(pair)} has no key before "="`, command);
    if (out.has(key)) throw new UsageError(`${option} gives ${JSON.stringify(key)} twice`, command);
    out.set(key, pair.slice(at + 1));
  }
  return Object.fromEntries(out);
}

/** Parses a non-negative integer such as an offset or a limit. */
export function parseCount(text: string, what: string, command: string, min = 0): number {
  const value = Number(text);
  if (!/^\d{1,9}$/.test(text) || value < min) {
    throw new UsageError(`${what} must be an integer of at least ${min}, not ${JSON.stringify(text)}`, command);
  }
  return value;
}

/**
 * An option that sets a value or, given as the word `reset` (`none`, `default`), clears it:
 * undefined when absent, null for the word, else what `parse` makes of it.
 */
export function resettableOption(
  options: ParsedOptions,
  name: string,
  reset: string,
  parse: (text: string, what: string) => number,
): number | null | undefined {
  const text = options.string(name);
  if (text === undefined) return undefined;
  return text === reset ? null : parse(text, `--${name}`);
}

/** The `--offset` / `--limit` options of a list command; `noun` is what it lists, e.g. `runners`. */
export function pageOptions(noun: string): OptionSpecs {
  return {
    offset: { type: "string", value: "<n>", help: `skip this many ${noun} (default 0)` },
    // The coordinator's own bounds on a page (1 to 500, 50 when not given).
    limit: { type: "string", value: "<n>", help: "show at most this many, up to 500 (default 50)" },
  };
}

/** The page that `--offset` / `--limit` (see pageOptions) ask for; the coordinator's defaults fill in the rest. */
export function pageQuery(options: ParsedOptions, command: string): PageQuery {
  const query: PageQuery = {};
  const offset = options.string("offset");
  const limit = options.string("limit");
  if (offset !== undefined) query.offset = parseCount(offset, "--offset", command);
  if (limit !== undefined) query.limit = parseCount(limit, "--limit", command, 1);
  return query;
}
