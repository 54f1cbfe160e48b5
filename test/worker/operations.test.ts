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

  it("/metrics: request counters and storage gauges in Prometheus text", async () => {
    await w.fetch(new Request(`${BASE}/health`));
    const res = await w.fetch(new Request(`${BASE}/metrics`));
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    expect(text).toMatch(/coordinator_http_requests_total\{method="GET",route="\/health",status="200"\} \d+/);
    expect(text).toMatch(/^coordinator_contexts \d+$/m);
    expect(text).toMatch(/^coordinator_contexts_due \d+$/m);
  });
});
