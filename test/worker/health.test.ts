import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { testWorker } from "./harness.js";

describe("GET /health inside workerd", () => {
  it("answers 200 after a real round trip to Redis through the REST endpoint", async () => {
    const res = await exports.default.fetch("http://coordinator.test/health");
    expect(res.status).toBe(200);
    const body = (await res.json()) as { status: string; redis: { reachable: boolean; latency_ms: number } };
    expect(body.status).toBe("ok");
    expect(body.redis.reachable).toBe(true);
    expect(body.redis.latency_ms).toBeGreaterThanOrEqual(0);
  });

  it("answers 503 problem+json when storage is unreachable", async () => {
    const unreachable = testWorker("health-unreachable", {
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
      REDIS_TIMEOUT_MS: "1000",
    });
    const res = await unreachable.fetch(new Request("http://coordinator.test/health"));
    expect(res.status).toBe(503);
    expect(res.headers.get("content-type")).toBe("application/problem+json");
    const body = (await res.json()) as { type: string; status: number; redis: { reachable: boolean } };
    expect(body).toMatchObject({ type: "/problems/storage-unavailable", status: 503, redis: { reachable: false } });
  });

  it("runs the cron's sweep to its end while storage is unreachable: it says so and tries again next time", async () => {
    const unreachable = testWorker("sweep-unreachable", {
      UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
      REDIS_TIMEOUT_MS: "1000",
    });
    const warned: string[] = [];
    const warn = console.warn;
    console.warn = (...args: unknown[]) => void warned.push(args.map(String).join(" "));
    try {
      await expect(unreachable.sweep()).resolves.toBeUndefined();
    } finally {
      console.warn = warn;
    }
    expect(
      warned.some((line) => /^sweep: storage is unreachable/.test(line)),
      warned.join("\n"),
    ).toBe(true);
  });

  it("answers unknown routes with a 404 problem", async () => {
    const res = await exports.default.fetch("http://coordinator.test/nowhere");
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ type: "/problems/no-route", status: 404 });
  });
});
