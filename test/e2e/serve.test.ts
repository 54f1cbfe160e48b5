import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { eventually } from "../support/eventually.js";
import { attemptsOf, flowEnd, runsIn } from "../support/flow-runs.js";
import { runToEnd } from "../support/process.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// `npm run serve` (infra/serve/, docs/deploy.md): the bundle `wrangler deploy` builds, on plain
// workerd, started as its own process with the secrets in its environment, over a redis-server
// and the REST endpoint of the stack's own. A flow runs through it with the reference runner; a
// restart keeps a sleeping flow's Durable Object (its storage and its alarm) on disk, and the
// flow ends after it; its own cron firer runs the sweep; its assets are served as `wrangler dev`
// serves them; it refuses to start without its secrets. The stack starts with its cron off, so
// that nothing but the object's own alarm can end the sleep across the restart.

const root = path.resolve(import.meta.dirname, "../..");
const { stack, admin, submit } = usePrivateStack("serve", { target: "serve", cron: false });

describe("npm run serve", () => {
  it("runs a flow end to end with the reference runner; /health and /ready answer", async () => {
    const health = await fetch(`${stack().url}/health`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", redis: { reachable: true } });
    const ready = await fetch(`${stack().url}/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ ready: true, redis: "reachable" });

    const ctx = (await admin().client.createContext()).id;
    await (await stack().registerReferenceRunner(admin().client, ctx, "push")).start();
    const flow = await submit(ctx, {
      jobs: [
        { name: "greet", script_type: "sh", script: 'echo "word=hello" > "$RESULT_FILE"' },
        {
          name: "shout",
          depends: ["greet"],
          script_type: "python",
          // A dependency's result arrives as DEP_<JOB>_<KEY>.
          script:
            "import os\nopen(os.environ['RESULT_FILE'], 'w').write('loud=' + os.environ['DEP_GREET_WORD'].upper())",
        },
      ],
    });
    const ended = await flowEnd(admin().client, ctx, flow.id, 60_000);
    expect(ended.status).toBe("finished");
    expect(ended.result).toMatchObject({ greet: { word: "hello" }, shout: { loud: "HELLO" } });
  });

  it("serves the console and the API reference as wrangler dev serves them", async () => {
    const url = stack().url;
    const get = (p: string, init: RequestInit = {}) => fetch(`${url}${p}`, { redirect: "manual", ...init });
    // What `wrangler dev` (4.155) answered for these paths, recorded by hand: redirects to the
    // one spelling of each page, the `_headers` rules on assets and their redirects, the API's
    // own answers for what is no asset.
    const expected: [string, number, string | null, boolean][] = [
      ["/console", 307, "/console/", false],
      ["/console/index.html", 307, "/console/", true],
      ["/console/index", 307, "/console/", true],
      ["/console//", 307, "/console/", true],
      ["/console/%61pp.js", 307, "/console/app.js", true],
      ["/docs?x=1", 307, "/docs/?x=1", false],
      ["/docs/index.html", 307, "/docs/", true],
    ];
    for (const [p, status, location, csp] of expected) {
      const res = await get(p);
      expect([p, res.status, res.headers.get("location")]).toEqual([p, status, location]);
      expect([p, res.headers.has("content-security-policy")]).toEqual([p, csp]);
    }
    for (const [p, file, type] of [
      ["/console/", "console/index.html", "text/html; charset=utf-8"],
      ["/console/app.js", "console/app.js", "text/javascript; charset=utf-8"],
      ["/console/console.css", "console/console.css", "text/css; charset=utf-8"],
      ["/docs/", "docs/index.html", "text/html; charset=utf-8"],
    ] as const) {
      const res = await get(p);
      expect([p, res.status, res.headers.get("content-type")]).toEqual([p, 200, type]);
      expect(res.headers.get("cache-control")).toBe("public, max-age=0, must-revalidate");
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(await res.text()).toBe(readFileSync(path.join(stack().dir, "serve-data/bundle/assets", file), "utf8"));
      const etag = res.headers.get("etag") as string;
      expect((await get(p, { headers: { "if-none-match": etag } })).status).toBe(304);
      expect((await get(p, { headers: { "if-none-match": `W/${etag}` } })).status).toBe(304);
      const head = await get(p, { method: "HEAD" });
      expect([head.status, await head.text()]).toEqual([200, ""]);
    }
    expect((await get("/console/app.js", { method: "POST" })).status).toBe(405);
    // What is not an asset is the Worker's: its own problems, its own routes.
    for (const p of ["/_headers", "/console/missing.js", "/CONSOLE/", "/"]) {
      const res = await get(p);
      expect([p, res.status, res.headers.get("content-type")]).toEqual([p, 404, "application/problem+json"]);
    }
    expect((await get("/openapi.json")).status).toBe(200);
    expect((await get("/v1/")).status).toBe(401);
  });

  it("keeps a sleeping flow's Durable Object on disk across a restart: the flow ends after it", async () => {
    const ctx = (await admin().client.createContext()).id;
    const runner = await stack().registerReferenceRunner(admin().client, ctx, "push");
    const proc = await runner.start();
    const flow = await submit(ctx, {
      jobs: [
        { name: "before", script_type: "sh", script: "true" },
        { name: "nap", depends: ["before"], sleep: 3 },
        { name: "after", depends: ["nap"], script_type: "sh", script: 'echo "done=yes" > "$RESULT_FILE"' },
      ],
    });
    const napping = await eventually(
      async () => (await admin().client.loadFlow(ctx, flow.id)).jobs.find((j) => j.name === "nap" && j.sleep_until),
      30_000,
      100,
      "the sleep's start",
    );
    // workerd stopped and started again on the same data folder (no cron: only the object's own
    // alarm, kept on disk, can end the sleep), past the sleep's end.
    await stack().restartWorker();
    const ended = await flowEnd(admin().client, ctx, flow.id, 60_000);
    expect(ended.status).toBe("finished");
    expect(ended.result.after).toEqual({ done: "yes" });
    expect(Date.parse(ended.result.nap?.slept_until ?? "")).toBeGreaterThanOrEqual((napping.sleep_until ?? 0) * 1000);
    expect(attemptsOf(runsIn(proc.output()), flow.id)).toEqual({ before: [1], after: [1] });
    const objects = path.join(stack().dir, "serve-data/durable-objects/flow-coordinator-FlowCoordinator");
    expect(readdirSync(objects).filter((f) => f.endsWith(".sqlite")).length).toBeGreaterThan(1);
  }, 120_000);

  it("fires wrangler.toml's cron triggers itself: the sweep runs within the minute", async () => {
    const sweeps = async () =>
      Number((await stack().redis.exec<string | null>(["HGET", stack().keys.counters(), "sweeps"])) ?? 0);
    const before = await sweeps();
    await stack().restartWorker({ cron: true });
    await eventually(
      async () => ((await sweeps()) > before ? true : undefined),
      75_000,
      500,
      "a sweep fired by serve's cron",
    );
    await stack().restartWorker({ cron: false });
  }, 150_000);

  it("refuses to start without its secrets or its data folder, and beside a serve on the same folder", async () => {
    const serve = (args: string[], env: Record<string, string> = {}) =>
      runToEnd(process.execPath, ["--import", "tsx", "infra/serve/main.ts", ...args], {
        cwd: root,
        env: { PATH: process.env.PATH ?? "", ...env },
        timeoutMs: 60_000,
      });
    const noData = await serve([]);
    expect(noData.code).toBe(2);
    expect(noData.stderr).toMatch(/--data <dir> is required/);

    const noSecrets = await serve(["--data", path.join(stack().dir, "elsewhere")]);
    expect(noSecrets.code).toBe(1);
    for (const name of ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN", "COORDINATOR_SIGNING_KEY"])
      expect(noSecrets.stderr).toContain(`${name} is missing: set ${name}, or ${name}_FILE`);
    expect(existsSync(path.join(stack().dir, "elsewhere"))).toBe(false);

    const badKey = await serve(["--data", path.join(stack().dir, "elsewhere")], {
      UPSTASH_REDIS_REST_URL: "redis://127.0.0.1:6379",
      UPSTASH_REDIS_REST_TOKEN: "t",
      COORDINATOR_SIGNING_KEY: '{"kty":"RSA"}',
    });
    expect(badKey.code).toBe(1);
    expect(badKey.stderr).toMatch(/UPSTASH_REDIS_REST_URL is not an http/);
    expect(badKey.stderr).toMatch(/COORDINATOR_SIGNING_KEY is not an Ed25519 private JWK/);
    expect(badKey.stderr).not.toContain("RSA");

    const secrets = {
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:1",
      UPSTASH_REDIS_REST_TOKEN: "t",
      COORDINATOR_SIGNING_KEY: JSON.stringify(admin().jwk),
    };
    const twice = await serve(["--data", path.join(stack().dir, "serve-data"), "--listen", "127.0.0.1:1"], secrets);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toMatch(/serve-data is in use by process \d+/);
  });
});
