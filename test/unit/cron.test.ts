import http from "node:http";
import type { AddressInfo } from "node:net";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { cronsOf, fireCrons } from "../../infra/cron.js";
import { eventually } from "../support/eventually.js";

// The local stack fires the Worker's cron triggers itself, since `wrangler dev` never does.

describe("the local cron firer", () => {
  it("reads the cron triggers of wrangler.toml (none in the test config)", () => {
    const root = path.resolve(import.meta.dirname, "../..");
    expect(cronsOf(path.join(root, "wrangler.toml"))).toEqual(["* * * * *"]);
    expect(cronsOf(path.join(root, "wrangler.test.toml"))).toEqual([]);
  });

  it("GETs /__scheduled?cron=<expression> on the expression's schedule, and carries on after a failed fire", async () => {
    const hits: string[] = [];
    const server = http.createServer((req, res) => {
      hits.push(req.url ?? "");
      res.writeHead(hits.length === 1 ? 500 : 200).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const logged: string[] = [];
    const firer = fireCrons(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, ["* * * * * *"], (line) =>
      logged.push(line),
    );
    try {
      await eventually(() => (hits.length >= 2 ? true : undefined), 5_000, 50, "two fires, a second apart");
    } finally {
      firer.stop();
      server.close();
    }
    expect(hits.slice(0, 2)).toEqual([
      "/__scheduled?cron=*%20*%20*%20*%20*%20*",
      "/__scheduled?cron=*%20*%20*%20*%20*%20*",
    ]);
    expect(logged[0]).toBe("cron * * * * * *: the scheduled handler answered 500");
  });
});
