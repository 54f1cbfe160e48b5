import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DatabaseSync } from "node:sqlite";
import { lockDataDir, LOCK_FILE } from "../../infra/serve/data-lock.js";
import { readDeploySettings } from "../../infra/serve/deploy-config.js";
import {
  applyHeaderRules,
  decodePath,
  intentFor,
  parseHeaders,
  workerFirst,
  type AssetManifest,
} from "../../infra/serve/front/routing.js";
import { checkCoordinatorSecrets, COORDINATOR_SECRETS, readSecrets } from "../../infra/serve/secrets.js";
import { localAddress, parseVars } from "../../infra/serve/serve.js";
import { pruneEmptyObjects } from "../../infra/serve/storage.js";
import { capnpString, renderWorkerdConfig, type WorkerdPlan } from "../../infra/serve/workerd-config.js";
import { generateKeyPair } from "../../shared/auth/index.js";

// `npm run serve` (infra/serve/, docs/deploy.md) in parts: the asset routing its front Worker
// does (held to wrangler dev's answers end to end in test/e2e/serve.test.ts), the workerd config
// it writes, the secrets it reads, the lock on its data folder, and what it takes from
// wrangler.toml.

const root = path.resolve(import.meta.dirname, "../..");
const tmp = mkdtempSync(path.join(tmpdir(), "serve-unit-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const asset = (etag: string) => ({ etag, type: "text/html; charset=utf-8" });
const ASSETS: AssetManifest = {
  "/console/index.html": asset("a"),
  "/console/app.js": asset("b"),
  "/about.html": asset("c"),
};

describe("serve's asset routing (auto-trailing-slash, not_found_handling none)", () => {
  it("serves a folder's index at its slash, a page without .html, and redirects every other spelling", () => {
    expect(intentFor("/console/", ASSETS)).toEqual({ serve: "/console/index.html" });
    expect(intentFor("/console", ASSETS)).toEqual({ redirect: "/console/" });
    expect(intentFor("/console/index.html", ASSETS)).toEqual({ redirect: "/console/" });
    expect(intentFor("/console/index", ASSETS)).toEqual({ redirect: "/console/" });
    expect(intentFor("/console/app.js", ASSETS)).toEqual({ serve: "/console/app.js" });
    expect(intentFor("/about", ASSETS)).toEqual({ serve: "/about.html" });
    expect(intentFor("/about.html", ASSETS)).toEqual({ redirect: "/about" });
    expect(intentFor("/about/", ASSETS)).toEqual({ redirect: "/about" });
  });

  it("leaves what is no asset to the Worker", () => {
    for (const p of ["/", "/v1/contexts", "/console/missing.js", "/CONSOLE/", "/console/app.js/"])
      expect(intentFor(p, ASSETS), p).toBeNull();
  });

  it("decodes paths and folds slashes as the asset worker does", () => {
    expect(decodePath("/console/%61pp.js")).toBe("/console/app.js");
    expect(decodePath("/console//x")).toBe("/console/x");
    expect(decodePath("/bad%zz")).toBe("/bad%zz");
  });

  it("sends run_worker_first paths straight to the Worker, `!` patterns excepted", () => {
    expect(workerFirst(["/v1/*", "/rpc"], "/v1/contexts/1")).toBe(true);
    expect(workerFirst(["/v1/*", "/rpc"], "/rpc")).toBe(true);
    expect(workerFirst(["/v1/*", "/rpc"], "/rpc/x")).toBe(false);
    expect(workerFirst(["/v1/*", "!/v1/static/*"], "/v1/static/a.js")).toBe(false);
  });

  it("applies _headers rules in file order, with splats and placeholders", () => {
    const rules = parseHeaders(
      "# comment\n/console/*\n  X-A: one\n  X-B: b\n/console/:file\n  X-A: two\n  ! X-B\n/docs/*\n  X-Path: :splat\n",
    );
    const headers = new Headers({ "X-B": "own" });
    applyHeaderRules(rules, "/console/app.js", headers);
    expect([headers.get("X-A"), headers.get("X-B")]).toEqual(["one, two", null]);
    const docs = new Headers();
    applyHeaderRules(rules, "/docs/a/b.js", docs);
    expect(docs.get("X-Path")).toBe("a/b.js");
    expect(() => parseHeaders("  X-A: 1\n")).toThrow(/line 1: a header before any path/);
    expect(() => parseHeaders("/a\n  nonsense\n")).toThrow(/line 2: expected "Name: value"/);
  });
});

describe("serve's workerd config", () => {
  const plan: WorkerdPlan = {
    settings: {
      name: "flow-coordinator",
      configPath: "/srv/app/wrangler.toml",
      compatibilityDate: "2026-10-01",
      compatibilityFlags: ["nodejs_compat"],
      vars: { KEY_PREFIX: "", ODD: 'a "quoted"\\ line\nnext\u0001' },
      durableObjects: [{ binding: "FLOW_COORDINATOR", className: "FlowCoordinator", sql: true }],
      crons: ["* * * * *"],
    },
    configDir: "/srv/data",
    bundle: "/srv/data/bundle",
    storage: "/srv/data/durable-objects",
    listen: "*:8787",
    control: "127.0.0.1:9001",
    vars: { KEY_PREFIX: "", ODD: 'a "quoted"\\ line\nnext\u0001' },
    secrets: ["UPSTASH_REDIS_REST_TOKEN"],
    network: ["public", "private"],
  };
  const text = renderWorkerdConfig(plan);

  it("binds secrets by name from workerd's environment, never their values", () => {
    expect(text).toContain('(name = "UPSTASH_REDIS_REST_TOKEN", fromEnvironment = "UPSTASH_REDIS_REST_TOKEN")');
    expect(text).toContain('(name = "ODD", text = "a \\"quoted\\"\\\\ line\\nnext\\x01")');
  });

  it("embeds the bundle relative to the config, keeps storage on disk under a stable key", () => {
    expect(text).toContain('esModule = embed "bundle/worker/index.js"');
    expect(text).toContain('(name = "storage", disk = (path = "/srv/data/durable-objects", writable = true))');
    expect(text).toContain(
      '(className = "FlowCoordinator", uniqueKey = "flow-coordinator-FlowCoordinator", enableSql = true)',
    );
    expect(text).toContain('durableObjectStorage = (localDisk = "storage")');
    expect(text).toContain('compatibilityFlags = ["nodejs_compat"]');
    expect(text).toContain('(name = "http", address = "*:8787", http = (), service = "front")');
    expect(text).toContain('service = (name = "front", entrypoint = "Control")');
    expect(text).toContain('network = (allow = ["public", "private"]');
    expect(renderWorkerdConfig(plan)).toBe(text);
  });

  it("escapes capnp strings", () => {
    expect(capnpString('\\"\t\u007f')).toBe('"\\\\\\"\\t\\x7f"');
  });
});

describe("serve's secrets", () => {
  it("reads NAME or NAME_FILE, and names every missing, doubled, empty or unreadable one", () => {
    const file = path.join(tmp, "token");
    writeFileSync(file, "from-file\n");
    expect(
      readSecrets(COORDINATOR_SECRETS, {
        UPSTASH_REDIS_REST_URL: "http://127.0.0.1:8079",
        UPSTASH_REDIS_REST_TOKEN_FILE: file,
        COORDINATOR_SIGNING_KEY: "{}",
      }),
    ).toEqual({
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:8079",
      UPSTASH_REDIS_REST_TOKEN: "from-file",
      COORDINATOR_SIGNING_KEY: "{}",
    });
    let message = "";
    try {
      readSecrets(COORDINATOR_SECRETS, {
        UPSTASH_REDIS_REST_URL: "u",
        UPSTASH_REDIS_REST_URL_FILE: file,
        UPSTASH_REDIS_REST_TOKEN: "",
        COORDINATOR_SIGNING_KEY_FILE: path.join(tmp, "nowhere"),
        METRICS_TOKEN_FILE: file,
      });
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain("UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_URL_FILE are both set");
    expect(message).toContain("UPSTASH_REDIS_REST_TOKEN is empty");
    expect(message).toMatch(/COORDINATOR_SIGNING_KEY_FILE=.*nowhere cannot be read/);
    expect(message).not.toContain("METRICS_TOKEN");
  });

  it("checks the storage URL and the signing keys without printing them", async () => {
    const key = JSON.stringify(await generateKeyPair());
    expect(() =>
      checkCoordinatorSecrets({ UPSTASH_REDIS_REST_URL: "https://x.example", COORDINATOR_SIGNING_KEY: key }),
    ).not.toThrow();
    expect(() =>
      checkCoordinatorSecrets({ UPSTASH_REDIS_REST_URL: "redis://x", COORDINATOR_SIGNING_KEY: "secret-ish" }),
    ).toThrow(/UPSTASH_REDIS_REST_URL is not an http:\/\/ or https:\/\/ URL\n\s+COORDINATOR_SIGNING_KEY is not JSON/);
  });
});

describe("serve's data folder and command line", () => {
  it("locks the data folder: a live holder refuses, a dead one is taken over", () => {
    const data = mkdtempSync(path.join(tmp, "data-"));
    const lock = lockDataDir(data);
    lock.holdFor(1); // pid 1 is always alive
    expect(readFileSync(path.join(data, LOCK_FILE), "utf8")).toBe(`${process.pid} 1\n`);
    expect(() => lockDataDir(data)).toThrow(/is in use by process \d+/);
    lock.release();
    writeFileSync(path.join(data, LOCK_FILE), "999999999\n");
    const again = lockDataDir(data);
    expect(readFileSync(path.join(data, LOCK_FILE), "utf8")).toBe(`${process.pid}\n`);
    again.release();
    again.release();
  });

  it("removes the files of objects whose storage was deleted, and only those", () => {
    const ns = path.join(tmp, "storage", "app-Flow");
    mkdirSync(ns, { recursive: true });
    const sqlite = (name: string, sql: string) => {
      const db = new DatabaseSync(path.join(ns, name));
      db.exec(sql);
      db.close();
    };
    // What workerd leaves after deleteAll: the schema page and nothing else.
    sqlite("gone.sqlite", "PRAGMA journal_mode=WAL; CREATE TABLE t(x); DROP TABLE t; VACUUM;");
    sqlite("kept.sqlite", "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    sqlite("metadata.sqlite", "PRAGMA journal_mode=WAL; CREATE TABLE t(x); DROP TABLE t; VACUUM;");
    writeFileSync(path.join(ns, "other.sqlite"), "not a database at all, and short");
    expect(pruneEmptyObjects(path.join(tmp, "storage"))).toEqual({ objects: { "app-Flow": 2 }, pruned: 1 });
    expect(readdirSync(ns).sort()).toEqual(["kept.sqlite", "metadata.sqlite", "other.sqlite"]);
    expect(pruneEmptyObjects(path.join(tmp, "nowhere"))).toEqual({ objects: {}, pruned: 0 });
  });

  it("reads --var pairs and reaches a wildcard listener through the loopback", () => {
    expect(parseVars(["PUBLIC_URL:https://flows.example:8443/x", "EMPTY:"])).toEqual({
      PUBLIC_URL: "https://flows.example:8443/x",
      EMPTY: "",
    });
    expect(() => parseVars(["nocolon"])).toThrow(/expected NAME:value/);
    expect(() => parseVars(["1BAD:x"])).toThrow(/expected NAME:value/);
    expect(localAddress("*:8787")).toBe("127.0.0.1:8787");
    expect(localAddress("0.0.0.0:80")).toBe("127.0.0.1:80");
    expect(localAddress("10.0.0.5:8787")).toBe("10.0.0.5:8787");
  });
});

describe("what serve takes from wrangler.toml", () => {
  it("reads the project's own: vars, SQLite Durable Objects, assets, crons", () => {
    const settings = readDeploySettings(path.join(root, "wrangler.toml"));
    expect(settings.name).toBe("flow-coordinator");
    expect(settings.vars.KEY_PREFIX).toBe("");
    expect(settings.durableObjects.map((o) => [o.className, o.sql])).toEqual([
      ["FlowCoordinator", true],
      ["Dispatcher", true],
      ["ContextFeed", true],
      ["Scheduler", true],
    ]);
    expect(settings.assets).toEqual({ directory: path.join(root, "dist"), runWorkerFirst: ["/v1/*", "/rpc"] });
    expect(settings.crons).toEqual(["* * * * *"]);
  });

  it("refuses, by name, what plain workerd cannot give the Worker", () => {
    const config = path.join(tmp, "wrangler.toml");
    writeFileSync(
      config,
      [
        'name = "other"',
        'main = "index.js"',
        'compatibility_date = "2026-10-01"',
        "[[kv_namespaces]]",
        'binding = "KV"',
        'id = "abc"',
        "[assets]",
        'directory = "public"',
        'not_found_handling = "single-page-application"',
      ].join("\n"),
    );
    expect(() => readDeploySettings(config)).toThrow(
      /kv_namespaces[\s\S]*not_found_handling = "single-page-application"/,
    );
  });
});
