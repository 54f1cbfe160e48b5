/**
 * The runner's command line: `npm run -s runner -- --url … --context … --runner … --key-file …`
 * (`--help` for everything). Starts the runner (or a fleet's gateway or worker, `--mode`),
 * drains on SIGTERM / SIGINT and exits 0 once the running jobs have finished and reported; a
 * second signal stops at once.
 */
import { pathToFileURL } from "node:url";
import { readConfig, UsageError, USAGE } from "./config.js";
import { startFleetRunner } from "./fleet/fleet.js";
import { startRunner } from "./runner.js";

/** Runs the CLI; resolves with the exit code once the runner has drained. */
export async function main(argv: string[], env: NodeJS.ProcessEnv, cwd = process.cwd()): Promise<number> {
  let config;
  try {
    config = await readConfig(argv, env, cwd);
  } catch (error) {
    process.stderr.write(`runner: ${(error as Error).message}\n`);
    if (error instanceof UsageError) process.stderr.write("run with --help for usage\n");
    return error instanceof UsageError ? 2 : 1;
  }
  if (config.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  let runner;
  try {
    const { options } = config;
    runner = options.fleet ? await startFleetRunner({ ...options, fleet: options.fleet }) : await startRunner(options);
  } catch (error) {
    process.stderr.write(`runner: ${(error as Error).message}\n`);
    return 1;
  }
  const handle = runner;
  return new Promise<number>((resolve) => {
    // A fleet member may be drained by a signed request too.
    void handle.finished.then(() => resolve(0));
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      signals++;
      if (signals === 1) {
        process.stdout.write(`${new Date().toISOString()} ${signal}: draining (send it again to stop at once)\n`);
        void handle.drain().then(() => resolve(0));
      } else {
        process.stdout.write(`${new Date().toISOString()} ${signal}: stopping, killing running jobs\n`);
        void handle.stop().then(() => resolve(0));
      }
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  // `npm run runner` runs in the package's folder; INIT_CWD is where the user typed it (only when
  // this process is that script: one started under another inherits an INIT_CWD not its own).
  const { INIT_CWD, npm_lifecycle_event } = process.env;
  process.exitCode = await main(
    process.argv.slice(2),
    process.env,
    npm_lifecycle_event === "runner" && INIT_CWD ? INIT_CWD : process.cwd(),
  );
  // Sockets kept alive by fetch must not hold the process open once the runner is done.
  process.exit();
}
