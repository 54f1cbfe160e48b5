import { existsSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { buildConsole, kib } from "./console-build.js";
import { natsServerBinary } from "./nats-server.js";
import { hasRedisServer } from "./redis-server.js";

/**
 * Runs before `npm start`, `npm run dev` and `npm test` (npm's pre-scripts). What they need that
 * npm cannot install comes from Debian's packages: `redis-server` for all three, and for
 * `npm test` (`--browser`) `chromium`, the browser the console's tests drive, and `nats-server`,
 * which the runner fleet's tests start (`--nats`). When one is
 * missing on a Debian-like machine and we may install packages (as root, or with sudo that asks
 * no password: a fresh CI box, a container), it is installed; anywhere else the user is told
 * exactly what to install, before anything starts, instead of a failure deep inside a test.
 * Then the console's assets are built (infra/console-build.ts), unless they are current.
 */

/** Where the console's browser tests (test/e2e/console.test.ts) expect Debian's chromium. */
const CHROMIUM = "/usr/bin/chromium";

const ok = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: "ignore" }).status === 0;

/** Installs Debian packages; false (having said why) when this machine will not let us. */
function aptInstall(packages: string[], why: string, otherwise: string): boolean {
  const sudo = process.getuid?.() === 0 ? [] : ok("sudo", ["-n", "true"]) ? ["sudo", "-n"] : undefined;
  if (!sudo || !ok("apt-get", ["--version"])) {
    console.error(`${why} Install it (${otherwise}), then run this again.`);
    return false;
  }
  console.log(`${packages.join(", ")} missing: installing Debian's package`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  for (const args of [
    ["update", "-qq"],
    ["install", "-y", "-qq", ...packages],
  ]) {
    const [cmd, ...rest] = [...sudo, "apt-get", ...args] as [string, ...string[]];
    if (spawnSync(cmd, rest, { stdio: "inherit", env }).status !== 0) {
      console.error(`apt-get ${args.join(" ")} failed; install ${packages.join(", ")} yourself, then run this again.`);
      return false;
    }
  }
  return true;
}

async function main(): Promise<number> {
  if (
    !hasRedisServer() &&
    (!aptInstall(
      ["redis-server"],
      "redis-server is not installed, and npm start, npm run dev and npm test each start one of their own.",
      "Debian or Ubuntu: sudo apt-get install redis-server; macOS: brew install redis",
    ) ||
      !hasRedisServer())
  ) {
    return 1;
  }
  if (
    process.argv.includes("--browser") &&
    !existsSync(CHROMIUM) &&
    (!aptInstall(
      ["chromium"],
      `chromium is not installed at ${CHROMIUM}, and npm test drives it to test the web console.`,
      "Debian: sudo apt-get install chromium",
    ) ||
      !existsSync(CHROMIUM))
  ) {
    return 1;
  }
  if (
    process.argv.includes("--nats") &&
    !natsServerBinary() &&
    (!aptInstall(
      ["nats-server"],
      "nats-server is not installed, and npm test starts its own to test the runner fleet on JetStream.",
      "Debian: sudo apt-get install nats-server",
    ) ||
      !natsServerBinary())
  ) {
    return 1;
  }
  const built = await buildConsole();
  if (built.built) console.log(`console: built into dist/ (${kib(built.gzipBytes)} gzipped)`);
  return 0;
}

process.exitCode = await main();
