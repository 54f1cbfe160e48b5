import { spawnSync } from "node:child_process";
import { hasRedisServer } from "./redis-server.js";

/**
 * Runs before `npm start`, `npm run dev` and `npm test` (npm's pre-scripts): the one thing they
 * need that npm cannot install is `redis-server`. When it is missing on a Debian-like machine and
 * we may install packages (as root, or with sudo that asks no password: a fresh CI box, a
 * container), Debian's package is installed; anywhere else the user is told exactly what to
 * install, before anything starts, instead of a failure deep inside a test.
 */
function main(): number {
  if (hasRedisServer()) return 0;
  const ok = (cmd: string, args: string[]) => spawnSync(cmd, args, { stdio: "ignore" }).status === 0;
  const sudo = process.getuid?.() === 0 ? [] : ok("sudo", ["-n", "true"]) ? ["sudo", "-n"] : undefined;
  if (!sudo || !ok("apt-get", ["--version"])) {
    console.error(
      "redis-server is not installed, and npm start, npm run dev and npm test each start one of their own. " +
        "Install it (Debian or Ubuntu: sudo apt-get install redis-server; macOS: brew install redis), then run this again.",
    );
    return 1;
  }
  console.log("redis-server is missing: installing Debian's redis-server package");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  for (const args of [
    ["update", "-qq"],
    ["install", "-y", "-qq", "redis-server"],
  ]) {
    const [cmd, ...rest] = [...sudo, "apt-get", ...args] as [string, ...string[]];
    if (spawnSync(cmd, rest, { stdio: "inherit", env }).status !== 0) {
      console.error(`apt-get ${args.join(" ")} failed; install redis-server yourself, then run this again.`);
      return 1;
    }
  }
  return hasRedisServer() ? 0 : 1;
}

process.exitCode = main();
