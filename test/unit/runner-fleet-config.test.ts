import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { generateKeyPair } from "../../shared/auth/index.js";
import { readConfig } from "../../runner/config.js";

/** The runner's command line for a fleet (`--mode`, `--nats` and the JetStream settings). */

const dir = mkdtempSync(path.join(tmpdir(), "fleet-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function config(args: string[], env: NodeJS.ProcessEnv = {}) {
  const keyFile = path.join(dir, "runner.json");
  writeFileSync(keyFile, JSON.stringify(await generateKeyPair()));
  return readConfig(["--context", "3", "--runner", "4", "--key-file", keyFile, ...args], env, dir);
}

describe("the runner's fleet options", () => {
  it("reads a gateway's and a worker's settings; a worker needs no coordinator URL", async () => {
    const gateway = await config([
      "--url",
      "http://127.0.0.1:8787",
      "--mode",
      "gateway",
      "--nats",
      "nats://127.0.0.1:4222,nats://10.0.0.2:4222",
      "--capacity",
      "12",
      "--ack-wait",
      "10",
      "--max-deliver",
      "3",
    ]);
    expect(gateway.help).toBe(false);
    if (gateway.help) return;
    expect(gateway.options.fleet).toEqual({
      mode: "gateway",
      servers: ["nats://127.0.0.1:4222", "nats://10.0.0.2:4222"],
      setup: { ackWaitSeconds: 10, maxDeliver: 3 },
      capacity: 12,
    });
    expect(gateway.options.listen).toEqual({ host: "127.0.0.1", port: 8090 });

    const worker = await config([], {
      RUNNER_FLEET_MODE: "worker",
      RUNNER_NATS: "nats://n:4222",
      RUNNER_OPS_LISTEN: ":9100",
    });
    if (worker.help) throw new Error("no help asked");
    expect(worker.options.fleet).toMatchObject({ mode: "worker", opsListen: { host: "127.0.0.1", port: 9100 } });
    expect(worker.options.listen).toBeUndefined();
  });

  it("lets a worker's key file hold the public key alone, and no one else's", async () => {
    const { x } = await generateKeyPair();
    const publicFile = path.join(dir, "public.json");
    writeFileSync(publicFile, JSON.stringify({ kty: "OKP", crv: "Ed25519", x }));
    const base = ["--context", "3", "--runner", "4", "--key-file", publicFile, "--nats", "nats://n:4222"];
    const worker = await readConfig([...base, "--mode", "worker"], {}, dir);
    if (worker.help) throw new Error("no help asked");
    expect(worker.options.key).toEqual({ kty: "OKP", crv: "Ed25519", x });
    await expect(readConfig([...base, "--mode", "gateway", "--url", "http://c"], {}, dir)).rejects.toThrow(
      /is not an Ed25519 private JWK \(d:/,
    );
  });

  it("names what is wrong: an unknown mode, no --nats, a NATS URL that is not one, a bad number", async () => {
    await expect(config(["--url", "http://c", "--mode", "fleet"])).rejects.toThrow(
      /--mode must be single, gateway, worker or combined, not "fleet"/,
    );
    await expect(config(["--url", "http://c", "--mode", "gateway"])).rejects.toThrow(
      /--nats \(or RUNNER_NATS\) is required/,
    );
    await expect(config(["--mode", "worker", "--nats", "http://n:4222"])).rejects.toThrow(
      /--nats must be nats:\/\/host:port/,
    );
    await expect(config(["--mode", "worker", "--nats", "nats://n:4222", "--ack-wait", "0"])).rejects.toThrow(
      /--ack-wait must be a positive integer, not "0"/,
    );
    await expect(config(["--mode", "worker", "--nats", "nats://n:4222", "--max-age", "60"])).rejects.toThrow(
      /--max-age must be at least 120 seconds/,
    );
    await expect(config(["--url", "http://c", "--heartbeat", "2", "--started-after", "2000"])).rejects.toThrow(
      /--started-after must be below the heartbeat interval \(2000 ms\), not 2000/,
    );
    // Answering with results: a push runner of its own, within the coordinator's time to answer.
    expect(await config(["--url", "http://c", "--answer-within", "250"])).toMatchObject({
      options: { answerWithinMs: 250 },
    });
    await expect(config(["--url", "http://c", "--answer-within", "5001"])).rejects.toThrow(
      /--answer-within must be at most 5000 ms, not 5001/,
    );
    await expect(config(["--url", "http://c", "--pull"], { RUNNER_ANSWER_WITHIN: "100" })).rejects.toThrow(
      /--answer-within applies to a push runner of its own \(not --pull, not a fleet\)/,
    );
    // Without --mode, a gateway's settings mean nothing and --url stays required.
    await expect(config([])).rejects.toThrow(/--url \(or RUNNER_URL\) is required/);
  });
});
