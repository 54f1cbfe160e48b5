import { afterAll, describe, expect, it } from "vitest";
import { parsePrivateJwk } from "../../shared/auth/index.js";
import { BASE, testWorker } from "./harness.js";

const w = testWorker("operations");
afterAll(() => w.cleanup());

describe("operations endpoints", () => {
  it("/ready: storage reachable and a signing key, else 503 naming what is missing", async () => {
    const ready = await w.fetch(new Request(`${BASE}/ready`));
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({
      ready: true,
      redis: "reachable",
      signing_key: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
    });
    const keyless = testWorker("operations-keyless", { COORDINATOR_SIGNING_KEY: "" });
    const missing = await keyless.fetch(new Request(`${BASE}/ready`));
    expect(missing.status).toBe(503);
    expect(await missing.json()).toMatchObject({ type: "/problems/signing-key-missing" });
  });

  it("/info tells what this is, nothing secret", async () => {
    const info = (await (await w.fetch(new Request(`${BASE}/info`))).json()) as Record<string, unknown>;
    expect(info).toMatchObject({
      name: "flow-coordinator",
      api: "/v1",
      openapi: "/openapi.json",
      openrpc: "/openrpc.json",
      console: "/console/",
      docs: "/docs/",
      actor_registration: "open",
      key_prefix: w.prefix,
    });
    const text = JSON.stringify(info);
    expect(text).not.toContain("TOKEN");
    // Neither the storage token nor the signing key's private part, whatever they are named.
    expect(w.env.UPSTASH_REDIS_REST_TOKEN.length).toBeGreaterThan(8);
    expect(text).not.toContain(w.env.UPSTASH_REDIS_REST_TOKEN);
    const { d } = parsePrivateJwk(w.env.COORDINATOR_SIGNING_KEY ?? "", "COORDINATOR_SIGNING_KEY");
    expect(d.length).toBeGreaterThan(8);
    expect(text).not.toContain(d);
  });

  it("/metrics: storage-wide figures, and this isolate's request counters named as such, in Prometheus text", async () => {
    await w.fetch(new Request(`${BASE}/health`));
    const res = await w.fetch(new Request(`${BASE}/metrics`));
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    expect(text).toMatch(
      /^coordinator_isolate_http_requests_total\{method="GET",route="\/health",status="200"\} \d+$/m,
    );
    expect(text).toMatch(/^# HELP coordinator_isolate_http_requests_total .*this isolate/m);
    expect(text).toMatch(/^coordinator_contexts \d+$/m);
    expect(text).toMatch(/^coordinator_contexts_due \d+$/m);
    expect(text).toMatch(/^coordinator_sweeps_total \d+$/m);
    // Every sample belongs to the family its HELP and TYPE lines announced just before.
    let family = "";
    for (const line of text.trimEnd().split("\n")) {
      const head = /^# (HELP|TYPE) (\S+) /.exec(line);
      if (head) family = head[2] as string;
      else expect(line.split(/[{ ]/)[0]?.replace(/_(bucket|sum|count)$/, "")).toBe(family);
    }
  });

  it("/metrics: only for a scraper with METRICS_TOKEN, or in local development (ALLOW_INSECURE_HTTP)", async () => {
    const closed = testWorker("operations-closed", { ALLOW_INSECURE_HTTP: "false" });
    const off = await closed.fetch(new Request(`${BASE}/metrics`));
    expect(off.status).toBe(403);
    expect(await off.json()).toMatchObject({ type: "/problems/forbidden" });
    const token = "a-scraper-token-of-32-characters";
    const guarded = testWorker("operations-token", { ALLOW_INSECURE_HTTP: "false", METRICS_TOKEN: token });
    expect((await guarded.fetch(new Request(`${BASE}/metrics`))).status).toBe(403);
    const wrong = new Request(`${BASE}/metrics`, { headers: { authorization: `Bearer ${token}x` } });
    expect((await guarded.fetch(wrong)).status).toBe(403);
    const right = await guarded.fetch(
      new Request(`${BASE}/metrics`, { headers: { authorization: `Bearer ${token}` } }),
    );
    expect(right.status).toBe(200);
    expect(await right.text()).toMatch(/^coordinator_contexts \d+$/m);
  });
});
