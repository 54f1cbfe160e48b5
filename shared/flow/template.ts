import type { EnvVars } from "../model/index.js";

/**
 * Texts that name variables of a job's environment, as `${NAME}`: a wait's `key` and a
 * `sleep_until`. They are resolved when the job starts, from the environment a script job would
 * run with (jobEnvironment: the flow's and the job's env_vars, FLOW_ID, CONTEXT_ID, JOB_NAME,
 * and each dependency's result values as `DEP_<JOB>_<KEY>`). `$${` is a literal `${`. Nothing
 * else is evaluated: the only syntax is a variable's name. A flow template's texts may also name
 * its inputs, `${inputs.<name>}`, which a start rewrites to `${INPUT_<NAME>}` (inputs.ts): the
 * syntax is accepted here, and where inputs may be named is checked by who reads the file.
 */

export const VARIABLE = /\$(\$?)\{([^}]*)\}/g;
const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** `inputs.<name>`: an input of a flow template (an input's name is lower case, model/template.ts). */
export const INPUT_REFERENCE = /^inputs\.([a-z][a-z0-9_]{0,63})$/;

/** Why `text` is not a valid template (a `${` not closed, a name that is not one), or undefined. */
export function checkTemplate(text: string): string | undefined {
  for (const match of text.matchAll(VARIABLE)) {
    if (match[1] === "$") continue;
    const name = match[2] as string;
    if (name.startsWith("inputs.") && !INPUT_REFERENCE.test(name))
      return `\${${name}} does not name an input (lower-case letters, digits and _, starting with a letter)`;
    if (!NAME.test(name) && !INPUT_REFERENCE.test(name))
      return `\${${name}} does not name a variable (letters, digits and _, not starting with a digit)`;
  }
  const open = text.replace(VARIABLE, "").indexOf("${");
  return open >= 0 ? "a ${ is not closed by }" : undefined;
}

/** `text` with every `${NAME}` replaced by its value in `env`; an error names what is not set. */
export function resolveTemplate(text: string, env: EnvVars): { value: string } | { error: string } {
  const missing: string[] = [];
  const value = text.replace(VARIABLE, (_, escaped: string, name: string) => {
    if (escaped === "$") return `\${${name}}`;
    const found = env[name];
    if (found === undefined) missing.push(name);
    return found ?? "";
  });
  return missing.length > 0
    ? { error: `${missing.map((n) => `\${${n}}`).join(", ")} ${missing.length > 1 ? "are" : "is"} not set` }
    : { value };
}
