import { ApiError } from "../../shared/client/index.js";
import type { TemplateFileInput } from "../../shared/flow/index.js";
import { TemplateName, type TemplateVersion, type TemplateView } from "../../shared/model/index.js";
import { pageOptions, pageQuery, type Command, type Invocation } from "../command.js";
import { UsageError } from "../errors.js";
import { readFlowFile, refusedFlow } from "../flowfile.js";
import { fields, pageLines, plural, table, timestamp } from "../output.js";
import { contextSession } from "../session.js";
import {
  declaredInputs,
  inputLine,
  TEMPLATE_INPUT_OPTIONS,
  VERSION_OPTION,
  versionAndInputs,
  versionOption,
} from "../template-inputs.js";
import { watchToEnd } from "../watch.js";

/** Flow templates: `flowc template put|list|show|start|delete` (docs/templates.md). */

/** The `<context> <name>` a template command takes, checked, and a session. */
async function templateSession(invocation: Invocation, command: string) {
  const { contextId, session } = await contextSession(invocation, command);
  const name = invocation.args[1] ?? "";
  if (!TemplateName.safeParse(name).success)
    throw new UsageError(
      `<name> must be letters, digits, _ . - (starting with a letter or digit, at most 64), not ${JSON.stringify(name)}`,
      command,
    );
  return { contextId, name, session };
}

const PUT = "template put";

const put: Command = {
  name: PUT,
  summary: "store a flow file (with inputs) as a template's next version (admins)",
  usage: `${PUT} <context> <name> <file>`,
  args: ["context", "name", "file"],
  details: [
    "The file is a flow file (as for flowc flow submit, without id and start; its jobs take no id)",
    "that may declare inputs: `inputs: {region: {type: string, default: eu}}`, then named as",
    "${inputs.region} in a wait's key, a sleep_until or an env_vars value, and inputs.region in",
    "a when. Each PUT of a changed file is a new version (1, 2, …); the same file as the latest",
    "makes none. Fields the coordinator refuses are shown as file:line: field. See docs/templates.md.",
  ].join("\n"),
  examples: ["flowc template put 1 report examples/template.yaml"],
  async run(invocation) {
    const { contextId, name, session } = await templateSession(invocation, PUT);
    const file = readFlowFile(invocation.args[2] ?? "", invocation.cwd);
    let answer;
    try {
      answer = await session.client.templates.put(contextId, name, file.body as TemplateFileInput);
    } catch (error) {
      throw (error instanceof ApiError && refusedFlow(file, error)) || error;
    }
    const what = answer.created
      ? `stored as version ${answer.version}`
      : `unchanged: the same file as version ${answer.version}, the latest`;
    invocation.out.result(answer, [`template ${name} in context ${contextId} ${what} (${plural(answer.jobs, "job")})`]);
  },
};

const list: Command = {
  name: "template list",
  summary: "list a context's templates with their latest version (readers)",
  usage: "template list <context> [--offset <n>] [--limit <n>]",
  args: ["context"],
  options: pageOptions("templates"),
  examples: ["flowc template list 1", "flowc template list 1 --json"],
  async run(invocation) {
    const command = "template list";
    const { contextId, session } = await contextSession(invocation, command);
    const page = await session.client.templates.list(contextId, pageQuery(invocation.options, command));
    const rows = page.items.map((t) => [
      t.name,
      String(t.latest),
      t.kept === 1 ? String(t.latest) : `${t.oldest}-${t.latest}`,
      timestamp(t.updated_at),
      t.description ?? "",
    ]);
    const lines = rows.length > 0 ? table(["NAME", "LATEST", "KEPT", "UPDATED", "DESCRIPTION"], rows) : [];
    invocation.out.result(page, pageLines(page, lines, "template", `context ${contextId}`));
  },
};

/** A version and its template's versions as `template show` prints them. */
function versionLines(version: TemplateVersion, template: TemplateView): string[] {
  const inputs = Object.entries(declaredInputs(version)).map(([n, input]) => inputLine(n, input));
  const versions = template.versions.map((v) => [
    String(v.version),
    timestamp(v.created_at),
    `actor ${v.creator_id}`,
    String(v.jobs),
    v.inputs.join(", ") || "-",
  ]);
  return [
    ...fields([
      [
        "template",
        `${version.name} version ${version.version}${version.version === template.latest ? " (latest)" : ""}`,
      ],
      ["description", version.description ?? "-"],
      ["created", `${timestamp(version.created_at)} by actor ${version.creator_id}`],
      ["jobs", String(version.jobs)],
      ["digest", version.digest.slice(0, 16)],
    ]),
    "",
    ...(inputs.length > 0
      ? table(["INPUT", "TYPE", "DEFAULT", "REQUIRED", "DESCRIPTION"], inputs)
      : ["no inputs declared"]),
    "",
    ...table(["VERSION", "CREATED", "BY", "JOBS", "INPUTS"], versions),
  ];
}

const show: Command = {
  name: "template show",
  summary: "show a template's version (the latest by default): its inputs, and every version kept (readers)",
  usage: "template show <context> <name> [--version <n>]",
  args: ["context", "name"],
  options: { version: VERSION_OPTION },
  details: "--json prints the version with its file, as stored (defaults filled in).",
  examples: ["flowc template show 1 report", "flowc template show 1 report --version 2 --json"],
  async run(invocation) {
    const command = "template show";
    const { contextId, name, session } = await templateSession(invocation, command);
    const asked = versionOption(invocation.options, command);
    const [version, template] = await Promise.all([
      session.client.templates.version(contextId, name, asked),
      session.client.templates.get(contextId, name),
    ]);
    invocation.out.result(version, versionLines(version, template));
  },
};

const START = "template start";

const start: Command = {
  name: START,
  summary: "start a flow from a template with inputs (admins)",
  usage: `${START} <context> <name> [--version <n>] [--input <name=value> ...] [--watch] [--idempotency-key <key>]`,
  args: ["context", "name"],
  options: {
    ...TEMPLATE_INPUT_OPTIONS,
    watch: { type: "boolean", help: "then watch it to its end, as flowc flow watch does (exit 1 if it errors)" },
    "idempotency-key": {
      type: "string",
      value: "<key>",
      help: "starting again with the same key returns the first flow instead of a new one",
    },
  },
  details: [
    "Reads the version (the latest unless --version) to type each --input as it declares it, then",
    "starts that version: an input it does not declare, a value of the wrong type or a required one",
    "missing is refused naming it. The flow's environment has each input as INPUT_<NAME>.",
  ].join("\n"),
  examples: [
    "flowc template start 1 report --input region=us --input days=3 --watch",
    "flowc template start 1 report --version 2",
  ],
  async run(invocation) {
    const { options, out } = invocation;
    const { contextId, name, session } = await templateSession(invocation, START);
    const key = options.string("idempotency-key");
    if (key !== undefined && !/^[\x21-\x7e]{1,128}$/.test(key))
      throw new UsageError("--idempotency-key must be 1 to 128 printable characters without spaces", START);
    const { version, inputs } = await versionAndInputs(session.client, contextId, name, options, START);
    const view = await session.client.templates.start(
      contextId,
      name,
      { version: version.version, inputs },
      key !== undefined ? { idempotencyKey: key } : {},
    );
    const line = `flow ${view.id} started from template ${name} version ${version.version} in context ${contextId} (${plural(view.jobs.length, "job")}: ${view.jobs.map((j) => j.key).join(", ")})`;
    if (!options.flag("watch")) return out.result(view, [line]);
    out.line(line);
    return watchToEnd(session.client, contextId, view.id, out);
  },
};

const remove: Command = {
  name: "template delete",
  summary: "delete a template with every version; flows started from it stay (admins)",
  usage: "template delete <context> <name>",
  args: ["context", "name"],
  examples: ["flowc template delete 1 report"],
  async run(invocation) {
    const { contextId, name, session } = await templateSession(invocation, "template delete");
    await session.client.templates.delete(contextId, name);
    invocation.out.result({ deleted: true, name }, [`template ${name} deleted`]);
  },
};

/** The `template` commands. */
export const templateCommands: Command[] = [put, list, show, start, remove];
