/**
 * `flowc`: the command line of the flow coordinator (`npm run -s cli -- <command>`).
 * This file finds the command in argv, runs it, and turns any failure into one line on stderr
 * and an exit code: 2 for usage errors, 1 for everything else.
 */
import { GLOBAL_OPTIONS, parseCommandArgs, type Command, type Invocation } from "./command.js";
import { COMMANDS } from "./commands/index.js";
import { describeError, EXIT_USAGE, UsageError } from "./errors.js";
import { commandHelp, groupHelp, mainHelp } from "./help.js";
import { explainKey, isKeyRefused } from "./key-owner.js";
import { Output, type Writer } from "./output.js";

/** Global options that take a value: while looking for the command words, their values are skipped. */
const VALUE_OPTIONS = new Set(
  Object.entries(GLOBAL_OPTIONS)
    .filter(([, spec]) => spec.type === "string")
    .map(([name]) => `--${name}`),
);

/**
 * Indices of the first `count` words that are not options (nor a global option's value), so
 * `flowc --url U actor show 3` finds `actor` and `show` while `3` stays an argument.
 */
function commandWords(argv: string[], count: number): number[] {
  const found: number[] = [];
  for (let i = 0; i < argv.length && found.length < count; i++) {
    const token = argv[i] as string;
    if (token === "--") break;
    if (token.startsWith("-")) {
      if (VALUE_OPTIONS.has(token)) i++;
      continue;
    }
    found.push(i);
  }
  return found;
}

/** Whether `--help` / `-h` appears before any `--` (after it, words are arguments). */
function wantsHelp(argv: string[]): boolean {
  const end = argv.indexOf("--");
  return (end < 0 ? argv : argv.slice(0, end)).some((t) => t === "--help" || t === "-h");
}

interface Resolved {
  command?: Command;
  /** Help text to print instead of running anything. */
  help?: string;
  rest: string[];
}

/** Finds the command named by the first one or two words of argv. */
function resolveCommand(argv: string[]): Resolved {
  const [first] = commandWords(argv, 1);
  if (first === undefined) {
    if (wantsHelp(argv)) return { help: mainHelp(COMMANDS), rest: [] };
    throw new UsageError("missing command");
  }
  const word = argv[first] as string;
  const without = (indices: number[]) => argv.filter((_, i) => !indices.includes(i));
  // `flowc help runner list` is what people type when they forget `--help`.
  if (word === "help") return resolveCommand([...without([first]), "--help"]);

  const single = COMMANDS.find((c) => c.name === word);
  if (single) return { command: single, rest: without([first]) };

  const group = COMMANDS.filter((c) => c.name.startsWith(`${word} `));
  if (group.length === 0) throw new UsageError(`unknown command ${JSON.stringify(word)}`);
  const [, second] = commandWords(argv, 2);
  if (second === undefined) {
    if (wantsHelp(argv)) return { help: groupHelp(word, group), rest: [] };
    throw new UsageError(
      `missing command after "${word}": one of ${group.map((c) => c.name.split(" ")[1]).join(", ")}`,
      word,
    );
  }
  const name = `${word} ${argv[second]}`;
  const command = group.find((c) => c.name === name);
  if (!command) throw new UsageError(`unknown command ${JSON.stringify(name)}`, word);
  return { command, rest: without([first, second]) };
}

/** Runs the CLI on `argv` and returns the exit code; never throws. */
export async function main(
  argv: string[],
  env: NodeJS.ProcessEnv,
  cwd: string,
  stdout: Writer,
  stderr: Writer,
): Promise<number> {
  let invocation: Invocation | undefined;
  try {
    const resolved = resolveCommand(argv);
    if (resolved.help !== undefined) {
      stdout.write(resolved.help);
      return 0;
    }
    const command = resolved.command as Command;
    // Help wins over a broken command line: it is what shows how to fix it.
    if (wantsHelp(resolved.rest)) {
      stdout.write(commandHelp(command));
      return 0;
    }
    const { options, args, globals } = parseCommandArgs(command, resolved.rest);
    const out = new Output(globals.json, stdout, stderr, (stdout as { isTTY?: boolean }).isTTY === true);
    invocation = { options, args, globals, env, cwd, out };
    return (await command.run(invocation)) ?? 0;
  } catch (error) {
    const { message, exitCode, details } = describeError(error);
    // A key refused for the configured actor: say whose it is instead (a runner's, nobody's, another actor's).
    const named = invocation && isKeyRefused(error) ? await explainKey(invocation) : undefined;
    if (named) details.push(named);
    stderr.write(`flowc: ${message}\n`);
    for (const line of details) stderr.write(`  ${line}\n`);
    if (exitCode === EXIT_USAGE && argv.length === 0) stderr.write(mainHelp(COMMANDS));
    return exitCode;
  }
}

/**
 * `npm run cli` runs in the package's folder; npm records where the user typed it in INIT_CWD, so
 * relative paths mean what they meant. Only when this process is that script: one started under
 * another script (a test, the demo) inherits an INIT_CWD that is not its own.
 */
const cwd = process.env.npm_lifecycle_event === "cli" && process.env.INIT_CWD ? process.env.INIT_CWD : process.cwd();

// A reader that stopped reading (`flowc … | head`) is not an error: stop quietly, as Unix tools do.
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code === "EPIPE") process.exit(process.exitCode ?? 0);
    throw error;
  });
}
// exitCode rather than exit(): lets stdout drain when it is a pipe.
process.exitCode = await main(process.argv.slice(2), process.env, cwd, process.stdout, process.stderr);
