import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cleanEnv, expectOneErrorLine, newUser as newUserIn, npmRun } from "../support/flowc.js";

/**
 * The CLI's surface that needs no coordinator, as a user runs it: a real `flowc` process per
 * command (test/support/flowc.ts) for help and usage errors, a reader that goes away, and the npm
 * scripts' relative paths. Every user gets a temporary HOME, so no test ever reads or writes the
 * real ~/.config/flowc. What talks to a coordinator is in cli.test.ts.
 */

const root = path.resolve(import.meta.dirname, "../..");
const tmp = mkdtempSync(path.join(tmpdir(), "flowc-cli-usage-test-"));

afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A user of this file's own: a HOME under its temporary folder. */
const newUser = (name: string) => newUserIn(tmp, name);

const COMMANDS = [
  "keygen",
  "init",
  "actor register",
  "actor show",
  "actor rotate-key",
  "context create",
  "context show",
  "context grant",
  "context revoke",
  "context watch",
  "context delete",
  "runner register",
  "runner list",
  "runner show",
  "runner remove",
];

describe("flowc without a coordinator", () => {
  it("answers --help on every command with usage, options and an example", async () => {
    const user = newUser("helper");
    const top = await user.run("--help");
    expect(top.code).toBe(0);
    expect(top.stdout).toMatch(/^Usage: flowc <command>/m);
    for (const name of COMMANDS) expect(top.stdout).toMatch(new RegExp(`^  ${name}\\s{2,}\\S`, "m"));
    for (const option of ["--url", "--key-file", "--actor", "--profile", "--json"])
      expect(top.stdout).toContain(option);

    const runs = await Promise.all(
      [...COMMANDS, "actor", "context", "runner"].map(
        async (name) => [name, await user.run(...name.split(" "), "--help")] as const,
      ),
    );
    for (const [name, run] of runs) {
      expect(run.code, `${name}: ${run.stderr}`).toBe(0);
      expect(run.stderr).toBe("");
      expect(run.stdout).toMatch(new RegExp(`^Usage: flowc ${name}`));
      expect(run.stdout).toMatch(/\nExample:\n {2}flowc /);
    }
    expect(runs.find(([name]) => name === "runner register")?.[1].stdout).toMatch(/--script-types <list>/);
    const helpWord = await user.run("help", "runner", "list");
    expect(helpWord.code).toBe(0);
    expect(helpWord.stdout).toBe(runs.find(([name]) => name === "runner list")?.[1].stdout);
    // Help needs no configuration and no coordinator.
    expect(existsSync(user.profile)).toBe(false);
  });

  it("exits 2 with a pointer to --help on usage errors", async () => {
    const user = newUser("typo");
    expectOneErrorLine(await user.run("frobnicate"), 2, /^flowc: unknown command "frobnicate" \(see flowc --help\)$/);
    expectOneErrorLine(
      await user.run("actor", "frobnicate"),
      2,
      /^flowc: unknown command "actor frobnicate" \(see flowc actor --help\)$/,
    );
    expectOneErrorLine(
      await user.run("actor", "show", "--frobnicate"),
      2,
      /^flowc: unknown option --frobnicate \(see flowc actor show --help\)$/,
    );
    expectOneErrorLine(await user.run("context", "grant", "1", "readers"), 2, /missing argument <actor>/);
    expectOneErrorLine(
      await user.run("context", "grant", "1", "owners", "2"),
      2,
      /<list> must be one of admins, readers, executors/,
    );
    expectOneErrorLine(await user.run("keygen"), 2, /missing option --out/);
    const bare = await user.run();
    expect(bare.code).toBe(2);
    expect(bare.errors[0]).toBe("flowc: missing command (see flowc --help)");
  });

  it("stops quietly when its reader goes away (flowc … | head)", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", "cli/main.ts", "--help"], {
      cwd: root,
      env: { ...cleanEnv(), NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child.stdout.destroy(); // the reader is gone before the first line is written
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    expect(stderr).toBe("");
    expect(code).toBe(0);
  });
});

describe("npm scripts", () => {
  it("resolve relative paths against the folder the command was typed in, not the package's", async () => {
    const here = path.join(tmp, "elsewhere");
    mkdirSync(here, { recursive: true });
    const keygen = await npmRun(here, "cli", ["keygen", "--out", "relative-key.json"]);
    expect(keygen.code, keygen.stderr).toBe(0);
    expect(existsSync(path.join(here, "relative-key.json"))).toBe(true);
    expect(existsSync(path.join(root, "relative-key.json"))).toBe(false);

    const runner = await npmRun(here, "runner", [
      "--url",
      "http://127.0.0.1:9",
      "--context",
      "1",
      "--runner",
      "1",
      "--key-file",
      "missing-key.json",
    ]);
    expect(runner.code).toBe(2);
    expect(runner.errors[0]).toBe(`runner: --key-file: cannot read ${path.join(here, "missing-key.json")}: ENOENT`);
  });
});
