import path from "node:path";
import {
  MAX_DELIVERIES_PER_POST,
  PublicKey,
  RunnerType,
  ScriptType,
  WebUrl,
  type Runner,
  type RunnerRegistration,
  type RunnerUpdate,
  type RunnerWithDispatch,
} from "../../shared/model/index.js";
import {
  pageOptions,
  pageQuery,
  parseChoice,
  parseCount,
  parseId,
  type Command,
  type ParsedOptions,
} from "../command.js";
import { UsageError } from "../errors.js";
import { readPublicKey } from "../keyfile.js";
import { fields, pageLines, shortKey, table, timestamp } from "../output.js";
import { actorSession, objectSession } from "../session.js";

/** How jobs reach the runner: pushed to its address, pulled from its context's queues, or both. */
function delivery(runner: Runner): string {
  const push = `push ${runner.address}${runner.deliveries_per_post > 1 ? ` (${runner.deliveries_per_post} a POST)` : ""}`;
  if (runner.local && runner.address) return `pull + ${push}`;
  return runner.local ? "pull" : push;
}

function runnerLines(runner: Runner | RunnerWithDispatch): string[] {
  const dispatch = "dispatch" in runner ? runner.dispatch : undefined;
  return fields([
    ["runner", String(runner.id)],
    ["context", String(runner.context_id)],
    ["type", runner.runner_type],
    ["scripts", runner.script_types.join(", ")],
    ["delivery", delivery(runner)],
    ["concurrency", String(runner.concurrency)],
    ...(dispatch
      ? ([
          ["in flight", `${dispatch.in_flight} of ${runner.concurrency}`],
          ...(dispatch.last_error !== undefined
            ? [
                [
                  "last error",
                  `${dispatch.last_error} (${dispatch.last_error_at !== undefined ? timestamp(dispatch.last_error_at) : "?"}, ${dispatch.failures ?? 1} in a row)`,
                ],
                ["retry at", dispatch.retry_at !== undefined ? timestamp(dispatch.retry_at) : "-"],
              ]
            : []),
        ] as [string, string][])
      : []),
    ["topic", runner.topic],
    ["pubkey", runner.pubkey],
    ["created", timestamp(runner.created_at)],
    ["updated", timestamp(runner.updated_at)],
  ]);
}

const REGISTER = "runner register";
const UPDATE = "runner update";

/** The runner's public key, from --pubkey or --key-file (not both); undefined when neither is given. */
function runnerPubkey(options: ParsedOptions, cwd: string, command: string): string | undefined {
  const pubkey = options.string("pubkey");
  const keyFile = options.string("key-file");
  if (pubkey !== undefined && keyFile !== undefined)
    throw new UsageError("give the runner's key with one of --pubkey <x> and --key-file <file>, not both", command);
  if (keyFile !== undefined) return readPublicKey(path.resolve(cwd, keyFile), "--key-file");
  if (pubkey !== undefined && !PublicKey.safeParse(pubkey).success)
    throw new UsageError("--pubkey must be an Ed25519 public key: 43 base64url characters (a JWK's x)", command);
  return pubkey;
}

/** `--script-types a,b`: each one of the script types, at least one. */
function scriptTypes(list: string, command: string): RunnerUpdate["script_types"] {
  const types = list
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => {
      const parsed = ScriptType.safeParse(s);
      if (!parsed.success)
        throw new UsageError(
          `--script-types: ${JSON.stringify(s)} is not one of ${ScriptType.options.join(", ")}`,
          command,
        );
      return parsed.data;
    });
  if (types.length === 0) throw new UsageError("--script-types needs at least one script type", command);
  return types;
}

/** The fields a registration and an update share, as the options give them (each optional). */
function runnerFields(options: ParsedOptions, cwd: string, command: string): RunnerUpdate {
  const input: RunnerUpdate = {};
  const pubkey = runnerPubkey(options, cwd, command);
  if (pubkey !== undefined) input.pubkey = pubkey;
  const address = options.string("address");
  if (address !== undefined) {
    if (!WebUrl.safeParse(address).success)
      throw new UsageError(`--address must be an http(s) URL, not ${JSON.stringify(address)}`, command);
    input.address = address;
  }
  if (options.flag("local")) input.local = true;
  const types = options.string("script-types");
  if (types !== undefined) input.script_types = scriptTypes(types, command);
  const concurrency = options.string("concurrency");
  if (concurrency !== undefined) input.concurrency = parseCount(concurrency, "--concurrency", command, 1);
  const perPost = options.string("deliveries-per-post");
  if (perPost !== undefined) input.deliveries_per_post = parseCount(perPost, "--deliveries-per-post", command, 1);
  const topic = options.string("topic");
  if (topic !== undefined) input.topic = topic;
  return input;
}

function registration(options: ParsedOptions, cwd: string): RunnerRegistration {
  const type = options.string("type");
  if (type === undefined)
    throw new UsageError(`missing option --type (one of ${RunnerType.options.join(", ")})`, REGISTER);
  const runnerType = parseChoice(RunnerType.options, type, "--type", REGISTER);
  const { pubkey, ...fields } = runnerFields(options, cwd, REGISTER);
  if (pubkey === undefined)
    throw new UsageError("give the runner's key with exactly one of --pubkey <x> and --key-file <file>", REGISTER);
  const input: RunnerRegistration = { pubkey, runner_type: runnerType, ...fields };
  const id = options.string("id");
  if (id !== undefined) input.id = parseId(id, "--id", REGISTER);
  return input;
}

/** The options of what a runner is registered with, which `runner update` changes too. */
const RUNNER_OPTIONS: Command["options"] = {
  pubkey: { type: "string", value: "<x>", help: "the runner's Ed25519 public key (a JWK's x)" },
  "key-file": {
    type: "string",
    value: "<file>",
    help: "the runner's key file (private or public JWK): its public key is used",
  },
  address: { type: "string", value: "<url>", help: "https URL jobs are pushed to" },
  local: { type: "boolean", help: "the runner pulls jobs from the context's queues (the default without --address)" },
  "script-types": {
    type: "string",
    value: "<list>",
    help: `comma-separated: ${ScriptType.options.join(", ")} (default: the runner type)`,
  },
  concurrency: { type: "string", value: "<n>", help: "jobs it runs at once (default 1)" },
  "deliveries-per-post": {
    type: "string",
    value: "<n>",
    help: `deliveries pushed in one POST, for a runner that takes { "deliveries": [...] } (default 1, at most ${MAX_DELIVERIES_PER_POST})`,
  },
  topic: { type: "string", value: "<topic>", help: "its topic (default runner<id>)" },
};

const register: Command = {
  name: REGISTER,
  summary: "register a runner in a context (admins)",
  usage: "runner register <context> (--pubkey <x> | --key-file <file>) --type <type> [options]",
  args: ["context"],
  options: {
    ...RUNNER_OPTIONS,
    type: { type: "string", value: "<type>", help: `runner type: ${RunnerType.options.join(", ")}` },
    id: { type: "string", value: "<n>", help: "ask for this runner id" },
  },
  details: [
    "Here --key-file names the runner's key, not yours: the actor signing the request comes from",
    "FLOWC_KEY_FILE or the profile's key_file.",
  ].join("\n"),
  examples: [
    "flowc keygen --out runner.json",
    "flowc runner register 1 --key-file runner.json --type sh --local --script-types sh,python",
    "flowc runner register 1 --pubkey <x> --type python --address https://runner.example/jobs --concurrency 4",
    "flowc runner register 1 --key-file runner.json --type sh --address http://10.0.0.5:8090/ --concurrency 64 --deliveries-per-post 32",
  ],
  async run(invocation) {
    const contextId = parseId(invocation.args[0] ?? "", "<context>", REGISTER);
    const input = registration(invocation.options, invocation.cwd);
    const session = await actorSession(invocation, REGISTER);
    const runner = await session.client.createRunner(contextId, input);
    invocation.out.result(runner, [
      `runner ${runner.id} registered in context ${contextId} (${runner.runner_type}; ${delivery(runner)}; pubkey ${shortKey(runner.pubkey)})`,
    ]);
  },
};

const list: Command = {
  name: "runner list",
  summary: "list a context's runners (readers and up)",
  usage: "runner list <context> [--offset <n>] [--limit <n>]",
  args: ["context"],
  options: pageOptions("runners"),
  examples: ["flowc runner list 1", "flowc runner list 1 --offset 50 --limit 50"],
  async run(invocation) {
    const name = "runner list";
    const contextId = parseId(invocation.args[0] ?? "", "<context>", name);
    const query = pageQuery(invocation.options, name);
    const session = await actorSession(invocation, name);
    const page = await session.client.listRunners(contextId, query);
    const rows = page.items.map((r) => [
      String(r.id),
      r.runner_type,
      r.script_types.join(","),
      String(r.concurrency),
      delivery(r),
      shortKey(r.pubkey),
    ]);
    const lines = table(["ID", "TYPE", "SCRIPTS", "CONCURRENCY", "DELIVERY", "PUBKEY"], rows);
    invocation.out.result(page, pageLines(page, lines, "runner", `context ${contextId}`));
  },
};

const show: Command = {
  name: "runner show",
  summary: "show one runner (readers and up)",
  usage: "runner show <context> <runner>",
  args: ["context", "runner"],
  examples: ["flowc runner show 1 2"],
  async run(invocation) {
    const { contextId, id, session } = await objectSession(invocation, "<runner>", "runner show");
    const runner = await session.client.loadRunner(contextId, id);
    invocation.out.result(runner, runnerLines(runner));
  },
};

const update: Command = {
  name: UPDATE,
  summary: "change what a runner is registered with: its key, address, script types, concurrency (admins)",
  usage: `${UPDATE} <context> <runner> [--pubkey <x> | --key-file <file>] [--address <url>] [--local] [--script-types <list>] [--concurrency <n>] [--deliveries-per-post <n>] [--topic <topic>]`,
  args: ["context", "runner"],
  options: RUNNER_OPTIONS,
  details: [
    "Only the fields given change. A new key takes effect at once: the old one stops working.",
    "Here --key-file names the runner's key, not yours.",
  ].join("\n"),
  examples: ["flowc runner update 1 2 --concurrency 8", "flowc runner update 1 2 --key-file new-runner.json"],
  async run(invocation) {
    const input = runnerFields(invocation.options, invocation.cwd, UPDATE);
    if (Object.keys(input).length === 0)
      throw new UsageError("nothing to change: give at least one of the options (see --help)", UPDATE);
    const { contextId, id, session } = await objectSession(invocation, "<runner>", UPDATE);
    const runner = await session.client.updateRunner(contextId, id, input);
    invocation.out.result(runner, [`runner ${runner.id} updated in context ${contextId}`, ...runnerLines(runner)]);
  },
};

const remove: Command = {
  name: "runner remove",
  summary: "remove a runner; its key stops working (admins)",
  usage: "runner remove <context> <runner>",
  args: ["context", "runner"],
  examples: ["flowc runner remove 1 2"],
  async run(invocation) {
    const { contextId, id, session } = await objectSession(invocation, "<runner>", "runner remove");
    await session.client.deleteRunner(contextId, id);
    invocation.out.result({ context_id: contextId, runner_id: id, removed: true }, [
      `runner ${id} removed from context ${contextId}`,
    ]);
  },
};

/** The `runner` commands. */
export const runnerCommands: Command[] = [register, list, show, update, remove];
