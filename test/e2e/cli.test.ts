import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort } from "../../infra/redis-server.js";
import {
  expectOneErrorLine,
  flowc,
  newUser as newUserIn,
  register as registerAt,
  type User,
} from "../support/flowc.js";
import { startTestWorker, type TestWorker } from "../support/test-worker.js";

/**
 * The CLI as a user runs it: a real `flowc` process per command (test/support/flowc.ts), against a
 * real `wrangler dev` Worker over the test stack's Redis. Every user gets a temporary HOME, so no
 * test ever reads or writes the real ~/.config/flowc.
 */

const tmp = mkdtempSync(path.join(tmpdir(), "flowc-cli-test-"));
let worker: TestWorker | undefined;

beforeAll(async () => {
  worker = await startTestWorker("cli", tmp);
});

afterAll(async () => {
  await worker?.stop();
  rmSync(tmp, { recursive: true, force: true });
});

/** A user of this file's own: a HOME under its temporary folder. */
const newUser = (name: string, options: { profileVar?: boolean } = {}) => newUserIn(tmp, name, options);
const register = (user: User) => registerAt(user, (worker as TestWorker).url);

describe("flowc", () => {
  it("goes from nothing to a context with a runner, as the README has it", async () => {
    const alice = newUser("alice");
    const key = path.join(alice.home, "keys", "alice.json");

    const keygen = await alice.run("keygen", "--out", key);
    expect(keygen.code, keygen.stderr).toBe(0);
    const jwk = JSON.parse(readFileSync(key, "utf8")) as { x: string; d: string };
    expect(keygen.stdout).toContain(jwk.x);
    expect(statSync(key).mode & 0o777).toBe(0o600);
    expectOneErrorLine(await alice.run("keygen", "--out", key), 1, /already exists; pass --force/);
    expect(JSON.parse(readFileSync(key, "utf8"))).toEqual(jwk);

    const init = await alice.run("init", "--url", (worker as TestWorker).url, "--key-file", key);
    expect(init.code, init.stderr).toBe(0);
    expect(JSON.parse(readFileSync(alice.profile, "utf8"))).toEqual({ url: (worker as TestWorker).url, key_file: key });

    // Registration signs with the bare key over @target-uri: this passing means the Worker saw
    // the URL the CLI signed (wrangler dev does not rewrite it).
    const registered = await alice.run("actor", "register");
    expect(registered.code, registered.stderr).toBe(0);
    const [, actorId, shortPubkey = "-"] = /^actor (\d+) registered \(pubkey (\S+)…\)$/m.exec(registered.stdout) ?? [];
    expect(jwk.x.startsWith(shortPubkey)).toBe(true);
    expect(JSON.parse(readFileSync(alice.profile, "utf8"))).toMatchObject({ actor_id: Number(actorId) });

    const shown = await alice.run("actor", "show");
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`^actor\\s+${actorId}$`, "m"));
    expect(shown.stdout).toMatch(new RegExp(`^pubkey\\s+${jwk.x}$`, "m"));

    const created = await alice.run("context", "create");
    expect(created.code, created.stderr).toBe(0);
    const contextId = /^context (\d+) created \(admins (\d+);/.exec(created.stdout)?.[1];
    expect(created.stdout).toContain(`admins ${actorId};`);

    const runnerKey = path.join(alice.home, "runner.json");
    const runnerKeygen = await alice.run("keygen", "--out", runnerKey);
    expect(runnerKeygen.code).toBe(0);
    const runnerPub = (JSON.parse(readFileSync(runnerKey, "utf8")) as { x: string }).x;

    const runner = await alice.run(
      "runner",
      "register",
      String(contextId),
      "--key-file",
      runnerKey,
      "--type",
      "sh",
      "--local",
      "--script-types",
      "sh,python",
      "--concurrency",
      "2",
    );
    expect(runner.code, runner.stderr).toBe(0);
    const runnerId = /^runner (\d+) registered in context (\d+) \(sh; pull; pubkey /.exec(runner.stdout)?.[1];
    expect(Number(runnerId)).toBeGreaterThan(0);

    const list = await alice.run("runner", "list", String(contextId));
    expect(list.code, list.stderr).toBe(0);
    const lines = list.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^ID\s+TYPE\s+SCRIPTS\s+CONCURRENCY\s+DELIVERY\s+PUBKEY$/);
    expect(lines[1]).toMatch(new RegExp(`^${runnerId}\\s+sh\\s+sh,python\\s+2\\s+pull\\s+${runnerPub.slice(0, 8)}…$`));
    expect(lines.at(-1)).toBe(`1 of 1 runner in context ${contextId}`);

    const show = await alice.run("runner", "show", String(contextId), String(runnerId));
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(new RegExp(`^pubkey\\s+${runnerPub}$`, "m"));
    expect(show.stdout).toMatch(/^delivery\s+pull$/m);
    expect(show.stdout).toMatch(/^scripts\s+sh, python$/m);

    // Changed in place: only the fields given; nothing given is a usage error.
    const updated = await alice.run("runner", "update", String(contextId), String(runnerId), "--concurrency", "5");
    expect(updated.code, updated.stderr).toBe(0);
    expect(updated.stdout).toMatch(new RegExp(`^runner ${runnerId} updated in context ${contextId}$`, "m"));
    expect(updated.stdout).toMatch(/^concurrency\s+5$/m);
    expect(updated.stdout).toMatch(/^scripts\s+sh, python$/m);
    expectOneErrorLine(
      await alice.run("runner", "update", String(contextId), String(runnerId)),
      2,
      /nothing to change/,
    );

    // A push runner that takes several deliveries in one POST; more than 100 is refused, named.
    const pushKey = path.join(alice.home, "runner-push.json");
    expect((await alice.run("keygen", "--out", pushKey)).code).toBe(0);
    const pushArgs = ["runner", "register", String(contextId), "--key-file", pushKey, "--type", "sh"];
    const address = ["--address", "http://127.0.0.1:9/"];
    expectOneErrorLine(
      await alice.run(...pushArgs, ...address, "--deliveries-per-post", "101"),
      1,
      /^flowc: 400 .*body\.deliveries_per_post/,
    );
    const pushed = await alice.run(...pushArgs, ...address, "--deliveries-per-post", "16");
    expect(pushed.code, pushed.stderr).toBe(0);
    expect(pushed.stdout).toMatch(/\(sh; push http:\/\/127\.0\.0\.1:9\/ \(16 a POST\); pubkey /);
    const pushedId = /^runner (\d+) registered/.exec(pushed.stdout)?.[1] as string;
    expect((await alice.run("runner", "remove", String(contextId), pushedId)).code).toBe(0);

    const removed = await alice.run("runner", "remove", String(contextId), String(runnerId));
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stdout.trim()).toBe(`runner ${runnerId} removed from context ${contextId}`);
    expect((await alice.run("runner", "list", String(contextId))).stdout.trim()).toBe(
      `no runners in context ${contextId}`,
    );
    expectOneErrorLine(await alice.run("runner", "show", String(contextId), String(runnerId)), 1, /^flowc: 404 /);
  });

  it("grants and revokes: a second actor reads a context only while it is a reader", async () => {
    const owner = newUser("owner");
    const bob = newUser("bob", { profileVar: true });
    await register(owner);
    const bobId = await register(bob);
    expect(JSON.parse(readFileSync(bob.profile, "utf8"))).toMatchObject({ actor_id: bobId });

    const created = await owner.run("context", "create");
    expect(created.code, created.stderr).toBe(0);
    const contextId = /^context (\d+) created/.exec(created.stdout)?.[1] as string;
    expect(contextId).toBeDefined();

    const forbidden =
      /^flowc: 403 Forbidden: actor \d+ needs to be in admins or readers or executors of context \d+ \(needed: admins, readers, executors\)$/;
    expectOneErrorLine(await bob.run("context", "show", contextId), 1, forbidden);

    const granted = await owner.run("context", "grant", contextId, "readers", String(bobId));
    expect(granted.code, granted.stderr).toBe(0);
    expect(granted.stdout.trim()).toBe(`actor ${bobId} added to readers of context ${contextId} (readers: ${bobId})`);

    const shown = await bob.run("context", "show", contextId);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`^readers\\s+${bobId}$`, "m"));
    // A reader reads, but may not administer.
    expectOneErrorLine(
      await bob.run("context", "grant", contextId, "readers", String(bobId)),
      1,
      /^flowc: 403 .*\(needed: admins\)$/,
    );

    const revoked = await owner.run("context", "revoke", contextId, "readers", String(bobId));
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout.trim()).toBe(`actor ${bobId} removed from readers of context ${contextId} (readers: -)`);
    expectOneErrorLine(await bob.run("context", "show", contextId), 1, forbidden);
  });

  it("refuses to delete a context without --yes, and deletes it with", async () => {
    const dave = newUser("dave");
    await register(dave);
    const created = await dave.run("context", "create");
    expect(created.code, created.stderr).toBe(0);
    const contextId = /^context (\d+) created/.exec(created.stdout)?.[1] as string;

    const refused = await dave.run("context", "delete", contextId);
    expectOneErrorLine(refused, 2, /without --yes/);
    expect(refused.stdout).toBe("");
    expect((await dave.run("context", "show", contextId)).code).toBe(0);

    const deleted = await dave.run("context", "delete", contextId, "--yes");
    expect(deleted.code, deleted.stderr).toBe(0);
    expect(deleted.stdout.trim()).toBe(`context ${contextId} deleted`);
    expectOneErrorLine(await dave.run("context", "show", contextId), 1, /^flowc: 404 Not found: /);
  });

  it("prints parseable JSON with --json, wherever the flag is", async () => {
    const erin = newUser("erin");
    const erinId = await register(erin);

    const actor = await erin.run("--json", "actor", "show");
    expect(actor.code, actor.stderr).toBe(0);
    expect(JSON.parse(actor.stdout)).toMatchObject({ id: erinId, address: [] });

    const context = await erin.run("context", "create", "--json");
    expect(context.code, context.stderr).toBe(0);
    const contextId = (JSON.parse(context.stdout) as { id: number; admins: number[] }).id;
    expect(JSON.parse(context.stdout)).toMatchObject({ admins: [erinId], readers: [], executors: [] });

    const keygen = await erin.run("keygen", "--out", path.join(erin.home, "r.json"), "--json");
    expect(keygen.code, keygen.stderr).toBe(0);
    const { pubkey } = JSON.parse(keygen.stdout) as { pubkey: string };
    const runner = await erin.run(
      "runner",
      "register",
      String(contextId),
      "--pubkey",
      pubkey,
      "--type",
      "python",
      "--address",
      "http://127.0.0.1:9/jobs",
      "--json",
    );
    expect(runner.code, runner.stderr).toBe(0);
    expect(JSON.parse(runner.stdout)).toMatchObject({
      context_id: contextId,
      pubkey,
      local: false,
      address: "http://127.0.0.1:9/jobs",
      script_types: ["python"],
    });

    const list = await erin.run("runner", "list", String(contextId), "--json", "--limit", "10");
    expect(list.code, list.stderr).toBe(0);
    expect(JSON.parse(list.stdout)).toMatchObject({ total: 1, items: [{ pubkey, runner_type: "python" }] });
  });

  it("rotates an actor's key and points the profile at the new key file", async () => {
    const frank = newUser("frank");
    const frankId = await register(frank);
    const oldKey = path.join(frank.home, "key.json");
    const newKey = path.join(frank.home, "key-2.json");
    expect((await frank.run("keygen", "--out", newKey)).code).toBe(0);
    const newPub = (JSON.parse(readFileSync(newKey, "utf8")) as { x: string }).x;

    const rotated = await frank.run("actor", "rotate-key", "--new-key", newKey);
    expect(rotated.code, rotated.stderr).toBe(0);
    expect(rotated.stdout.trim()).toBe(`actor ${frankId} now uses key ${newPub.slice(0, 8)}… (${newKey})`);
    expect(JSON.parse(readFileSync(frank.profile, "utf8"))).toMatchObject({ key_file: newKey, actor_id: frankId });

    const shown = await frank.run("actor", "show");
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(new RegExp(`^pubkey\\s+${newPub}$`, "m"));
    // The old key is refused, and named: after the rotation it is nobody's.
    const old = await frank.run("actor", "show", "--key-file", oldKey);
    expect(old.code, old.stderr).toBe(1);
    expect(old.errors).toEqual([
      expect.stringMatching(/^flowc: 401 Unauthorized \[signature-invalid\]: /),
      `  the key in ${oldKey} is nobody's: no actor or runner is registered with it (flowc actor register registers it as a new actor)`,
    ]);
  });

  it("names what to set when configuration is missing, and the URL when it is unreachable", async () => {
    const user = newUser("nobody");
    expectOneErrorLine(
      await user.run("context", "show", "1"),
      1,
      /^flowc: no coordinator URL: pass --url, set FLOWC_URL, or set "url" in the profile /,
    );

    const url = (worker as TestWorker).url;
    const missingKey = path.join(user.home, "missing.json");
    expectOneErrorLine(
      await user.run("actor", "register", "--url", url, "--key-file", missingKey),
      1,
      new RegExp(`^flowc: key file ${missingKey} does not exist`),
    );
    const viaEnv = await flowc(["actor", "show", "--url", url], {
      ...user.env,
      FLOWC_KEY_FILE: missingKey,
      FLOWC_ACTOR_ID: "1",
    });
    expectOneErrorLine(viaEnv, 1, /does not exist \(from FLOWC_KEY_FILE\)/);

    const key = path.join(user.home, "key.json");
    await user.run("keygen", "--out", key);
    expectOneErrorLine(
      await user.run("context", "show", "1", "--url", url, "--key-file", key),
      1,
      /^flowc: no actor id: run flowc actor register, or pass --actor, set FLOWC_ACTOR_ID/,
    );

    const closed = `http://127.0.0.1:${await freePort()}`;
    expectOneErrorLine(
      await user.run("actor", "show", "--url", closed, "--key-file", key, "--actor", "1"),
      1,
      new RegExp(`^flowc: cannot reach the coordinator at ${closed}: ECONNREFUSED`),
    );
  });
});
