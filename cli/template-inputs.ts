import type { CoordinatorClient } from "../shared/client/index.js";
import {
  InputDeclarations,
  inputRequired,
  type InputDeclaration,
  type InputValues,
  type TemplateVersion,
} from "../shared/model/index.js";
import type { OptionSpec, OptionSpecs, ParsedOptions } from "./command.js";
import { parseCount } from "./command.js";
import { UsageError } from "./errors.js";

/*
 * What `template start` and `schedule create --template` share: the `--version` and `--input
 * name=value` options, and the values turned into the types the template declares (the API takes
 * JSON values of each input's type; a command line has only text).
 */

/** `--version <n>`: which version of a template. */
export const VERSION_OPTION: OptionSpec = {
  type: "string",
  value: "<n>",
  help: "the template's version (default: the latest)",
};

/** The options naming a template's version and inputs. */
export const TEMPLATE_INPUT_OPTIONS: OptionSpecs = {
  version: VERSION_OPTION,
  input: {
    type: "string",
    multiple: true,
    value: "<name=value>",
    help: "an input's value, read as its declared type (number, true/false, JSON); repeat for more",
  },
};

/** The `--version` given, if any. */
export function versionOption(options: ParsedOptions, command: string): number | undefined {
  const text = options.string("version");
  return text === undefined ? undefined : parseCount(text, "--version", command, 1);
}

/** A template version's declared inputs (none when the file declares none). */
export function declaredInputs(version: TemplateVersion): Record<string, InputDeclaration> {
  const parsed = InputDeclarations.safeParse(version.file.inputs ?? {});
  return parsed.success ? parsed.data : {};
}

/** One `--input` value as its declared type; an undeclared input stays text (the coordinator names it). */
function typed(name: string, text: string, input: InputDeclaration | undefined, command: string): unknown {
  const wrong = (what: string) =>
    new UsageError(`--input ${name} must be ${what}, not ${JSON.stringify(text)}`, command);
  switch (input?.type) {
    case "number": {
      const value = Number(text);
      if (text.trim() === "" || !Number.isFinite(value)) throw wrong("a number");
      return value;
    }
    case "boolean":
      if (text !== "true" && text !== "false") throw wrong("true or false");
      return text === "true";
    case "json":
      try {
        return JSON.parse(text) as unknown;
      } catch {
        throw wrong("JSON");
      }
    default:
      return text;
  }
}

/** The `--input name=value` options as the inputs of a start of `version`. */
export function inputValues(pairs: string[], version: TemplateVersion, command: string): InputValues {
  const declared = declaredInputs(version);
  const values: InputValues = {};
  for (const pair of pairs) {
    const at = pair.indexOf("=");
    if (at <= 0) throw new UsageError(`--input must be name=value, not ${JSON.stringify(pair)}`, command);
    const name = pair.slice(0, at);
    if (Object.hasOwn(values, name)) throw new UsageError(`--input ${name} is given twice`, command);
    values[name] = typed(name, pair.slice(at + 1), declared[name], command);
  }
  return values;
}

/**
 * The version a command starts (the one asked for, else the latest: read once, so the inputs are
 * typed by the version that is then started) and its inputs from `--input`.
 */
export async function versionAndInputs(
  client: CoordinatorClient,
  contextId: number,
  name: string,
  options: ParsedOptions,
  command: string,
): Promise<{ version: TemplateVersion; inputs: InputValues }> {
  const version = await client.templates.version(contextId, name, versionOption(options, command));
  return { version, inputs: inputValues(options.list("input"), version, command) };
}

/** `name (type, default …, required)`: an input as `template show` lists it. */
export function inputLine(name: string, input: InputDeclaration): string[] {
  const fallback = input.default !== undefined ? JSON.stringify(input.default) : "-";
  return [name, input.type, fallback, inputRequired(input) ? "yes" : "no", input.description ?? ""];
}
