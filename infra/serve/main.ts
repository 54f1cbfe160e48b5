/**
 * `npm run serve -- --data <dir> [options]`: the coordinator in production without wrangler, on
 * plain workerd (docs/deploy.md). Secrets come from the environment: each NAME, or NAME_FILE
 * naming a file that holds it.
 */
import path from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_NETWORK, parseVars, startServe } from "./serve.js";
import { checkCoordinatorSecrets, COORDINATOR_SECRETS, readSecrets } from "./secrets.js";

const USAGE = `usage: npm run serve -- --data <dir> [options]

Runs the Worker \`wrangler deploy\` builds on plain workerd: Durable Objects on disk in <dir>,
the console and the API reference, /health and /ready, the cron triggers of wrangler.toml.

  --data <dir>          where it keeps its state (created if missing; one process at a time)
  --listen <host:port>  the public socket (default 127.0.0.1:8787; *:8787 for every interface)
  --control-port <n>    the cron triggers' socket, on 127.0.0.1 (default: a free port)
  --var NAME:value      set or override a var of wrangler.toml [vars] (repeatable), e.g. PUBLIC_URL
  --network <list>      what the Worker may reach (default ${DEFAULT_NETWORK.join(",")}; workerd's
                        words: public, private, local, or CIDR blocks)
  --no-build            run the bundle <dir> already holds instead of building it again
  --no-cron             leave the cron triggers to something else (one process of several, a timer)
  --config <file>       the wrangler.toml (default: the project's)

Secrets (environment, or NAME_FILE=<file>): ${COORDINATOR_SECRETS.required.join(", ")}
(required); ${COORDINATOR_SECRETS.optional.join(", ")} (optional).`;

const root = path.resolve(import.meta.dirname, "../..");

function fail(message: string, code = 2): never {
  console.error(`serve: ${message}`);
  process.exit(code);
}

function parse() {
  try {
    return parseArgs({
      options: {
        data: { type: "string" },
        listen: { type: "string" },
        "control-port": { type: "string" },
        var: { type: "string", multiple: true },
        network: { type: "string" },
        "no-build": { type: "boolean" },
        "no-cron": { type: "boolean" },
        config: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }).values;
  } catch (error) {
    return fail(`${(error as Error).message}\n\n${USAGE}`);
  }
}

const values = parse();
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
if (!values.data) fail(`--data <dir> is required: the folder it keeps its Durable Objects in\n\n${USAGE}`);
const listen = values.listen ?? "127.0.0.1:8787";
if (!/^(\*|\[[0-9a-fA-F:]+\]|[^:\s]+):\d{1,5}$/.test(listen) || Number(listen.split(":").pop()) > 65535)
  fail(`--listen ${listen}: expected host:port, e.g. 127.0.0.1:8787 or *:8787`);
const controlPort = values["control-port"] === undefined ? undefined : Number(values["control-port"]);
if (controlPort !== undefined && !(Number.isInteger(controlPort) && controlPort > 0 && controlPort <= 65535))
  fail(`--control-port ${values["control-port"]}: expected a port number`);

try {
  const secrets = readSecrets(COORDINATOR_SECRETS);
  checkCoordinatorSecrets(secrets);
  const served = await startServe({
    configPath: values.config ? path.resolve(values.config) : path.join(root, "wrangler.toml"),
    data: values.data,
    listen,
    ...(controlPort ? { controlPort } : {}),
    vars: parseVars(values.var ?? []),
    secrets,
    build: !values["no-build"],
    cron: !values["no-cron"],
    ...(values.network ? { network: values.network.split(",").map((s) => s.trim()) } : {}),
    log: (line) => console.log(line),
  });
  console.log(`ready         ${served.url}/health, ${served.url}/console/; SIGTERM or Ctrl-C stops it`);
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.log(`${signal}: stopping`);
    void served.stop().then(() => process.exit(0));
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  // workerd ending on its own (a crash) ends serve too, with its code: a supervisor restarts both.
  served.child.once("exit", (code, signal) => {
    if (!stopping) fail(`workerd exited (${code ?? signal}) on its own`, 1);
  });
} catch (error) {
  fail((error as Error).message, 1);
}
