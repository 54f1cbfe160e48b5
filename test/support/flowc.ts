import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { expect } from "vitest";
import { FLOWC_BUNDLE } from "./flowc-bundle.js";
import { runToEnd, watchProcess, type WatchedProcess } from "./process.js";

/**
 * The CLI as a user runs it: a real `flowc` process per command (`node cli/main.ts` bundled once
 * per run, flowc-bundle.ts), with an environment of the user's own, so no test ever reads or writes the real
 * ~/.config/flowc nor takes the caller's FLOWC_* or RUNNER_* settings.
 */

const root = path.resolve(import.meta.dirname, "../..");

/**
 * How node runs the bundle: from the checkout's own path even where node_modules is a symlink
 * (a git worktree's), so that `flowc runner start` finds this checkout's runner, not the one
 * the symlink points into.
 */
const BUNDLED = ["--preserve-symlinks-main", FLOWC_BUNDLE];

/** A command that ran to its end. */
export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stderr's lines, without empty ones. */
  errors: string[];
}

/** The environment without the caller's own flowc and runner settings, so only what a test sets applies. */
export function cleanEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("FLOWC_") && !name.startsWith("RUNNER_")),
  );
}

/** Runs `flowc <args>` as its own process, to its end, and collects its output. */
export async function flowc(args: string[], env: Record<string, string>): Promise<Run> {
  const run = await runToEnd(process.execPath, [...BUNDLED, ...args], {
    cwd: root,
    env: { ...cleanEnv(), NO_COLOR: "1", ...env },
  });
  return { ...run, errors: run.stderr.split("\n").filter(Boolean) };
}

/** Starts `flowc <args>` as a long-running process (`flowc runner start`), its output watched. */
export function startFlowc(args: string[], env: Record<string, string>): WatchedProcess {
  // Bundled too: `flowc context watch` once did not end on SIGINT when bundled; the cause was
  // an abort lost in Node's fetch after a garbage collection (shared/client/events.ts), which
  // the bundle's fewer allocations only made rarer, not absent.
  const child = spawn(process.execPath, [...BUNDLED, ...args], {
    cwd: root,
    env: { ...cleanEnv(), NO_COLOR: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const watched = watchProcess(child, `flowc ${args.slice(0, 2).join(" ")}`);
  return {
    ...watched,
    // `flowc runner start` runs the runner in a process group of its own, which a SIGKILL of
    // flowc would leave running (found still running after the tests): stopped as a user stops
    // it, with SIGTERM, which flowc passes on, and only then killed if still there.
    kill: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        await Promise.race([watched.exited, new Promise((r) => setTimeout(r, 10_000))]);
      }
      await watched.kill();
    },
  };
}

/**
 * Runs `npm run -s <script> -- <args>` for this package from `cwd`, as a user in another folder
 * would; npm's own warnings are left out of `errors`.
 */
export async function npmRun(cwd: string, script: string, args: string[]): Promise<Run> {
  const run = await runToEnd("npm", ["--prefix", root, "run", "-s", script, "--", ...args], {
    cwd,
    env: { ...cleanEnv(), NO_COLOR: "1" },
  });
  return { ...run, errors: run.stderr.split("\n").filter((l) => l && !l.startsWith("npm warn")) };
}

/** Someone using flowc: their own HOME, and optionally a profile named by FLOWC_PROFILE. */
export interface User {
  home: string;
  env: Record<string, string>;
  /** Where their profile is (the default place under HOME, or FLOWC_PROFILE's). */
  profile: string;
  run(...args: string[]): Promise<Run>;
}

/** A user named `name` with a HOME of their own under `dir`. */
export function newUser(dir: string, name: string, options: { profileVar?: boolean } = {}): User {
  const home = path.join(dir, name);
  mkdirSync(home, { recursive: true });
  const profile = options.profileVar
    ? path.join(home, "profiles", `${name}.json`)
    : path.join(home, ".config", "flowc", "profile.json");
  const env: Record<string, string> = { HOME: home, ...(options.profileVar ? { FLOWC_PROFILE: profile } : {}) };
  return { home, env, profile, run: (...args) => flowc(args, env) };
}

/** keygen → init → actor register against the coordinator at `url`, as the README has it; returns the new actor's id. */
export async function register(user: User, url: string): Promise<number> {
  const key = path.join(user.home, "key.json");
  const keygen = await user.run("keygen", "--out", key);
  expect(keygen.code, keygen.stderr).toBe(0);
  const init = await user.run("init", "--url", url, "--key-file", key);
  expect(init.code, init.stderr).toBe(0);
  const registered = await user.run("actor", "register");
  expect(registered.code, registered.stderr).toBe(0);
  const id = Number(/^actor (\d+) registered/.exec(registered.stdout)?.[1]);
  expect(id).toBeGreaterThan(0);
  return id;
}

/** The run failed with exit `code` and exactly one line on stderr, `flowc: …` matching `pattern`, no stack trace. */
export function expectOneErrorLine(run: Run, code: number, pattern: RegExp): void {
  expect(run.code, run.stdout + run.stderr).toBe(code);
  expect(run.errors, run.stderr).toHaveLength(1);
  expect(run.errors[0]).toMatch(/^flowc: /);
  expect(run.errors[0]).toMatch(pattern);
  expect(run.stderr).not.toMatch(/\n\s+at /); // no stack trace
}

/**
 * The environment of flowc run as a private stack's actor: its key written into the stack's
 * folder, no profile, the stack's URL and the actor's id, HOME in the stack's folder.
 */
export function actorEnv(
  stack: { dir: string; url: string },
  actor: { id: number; jwk: unknown },
): Record<string, string> {
  const keyFile = path.join(stack.dir, "actor-key.json");
  writeFileSync(keyFile, JSON.stringify(actor.jwk), { mode: 0o600 });
  return {
    HOME: stack.dir,
    FLOWC_PROFILE: path.join(stack.dir, "no-profile.json"),
    FLOWC_URL: stack.url,
    FLOWC_KEY_FILE: keyFile,
    FLOWC_ACTOR_ID: String(actor.id),
  };
}
