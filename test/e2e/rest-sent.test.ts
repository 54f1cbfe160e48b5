import { describe, expect, it } from "vitest";
import { DEFAULT_REST_OPTIONS, startRestServer } from "../../infra/redis-rest/index.js";
import { readTestStackConfig } from "../support/stack-config.js";

// The REST endpoint's count of what it sent to Redis, which the benchmark (bench/) reports as
// this project's "commands sent": one per command, whatever the request's form, a transaction's
// MULTI and EXEC included; a refused request counts nothing.

const stack = readTestStackConfig();

describe("the REST endpoint's count of commands sent", () => {
  it("counts each command once per request form, and nothing for a refused request", async () => {
    const server = await startRestServer({ ...DEFAULT_REST_OPTIONS, redisUrl: stack.redisUrl, port: 0, token: "t" });
    const post = (path: string, body: unknown, token = "t") =>
      fetch(`${server.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
    try {
      expect(server.sent()).toEqual({ requests: 0, commands: 0 });
      expect((await post("/", ["PING"])).status).toBe(200);
      expect((await post("/pipeline", [["PING"], ["PING"], ["PING"]])).status).toBe(200);
      expect((await post("/multi-exec", [["PING"], ["PING"]])).status).toBe(200);
      expect((await fetch(`${server.url}/ping`, { headers: { authorization: "Bearer t" } })).status).toBe(200);
      expect((await post("/", ["PING"], "wrong")).status).toBe(401);
      expect(server.sent()).toEqual({ requests: 4, commands: 1 + 3 + (2 + 2) + 1 });
    } finally {
      await server.close();
    }
  });
});
