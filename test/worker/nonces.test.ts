import { runInDurableObject } from "cloudflare:test";
import { afterAll, describe, expect, it } from "vitest";
import { ledgerKey, NONCE_PREFIX, NonceLedger } from "../../functions/flow/nonces.js";
import { testWorker } from "./harness.js";

// The nonce ledger of a flow's object, in a real Durable Object's storage: a nonce is taken once
// until it expires, and expired ones are swept.

const w = testWorker("nonces");
afterAll(() => w.cleanup());

const T = 1_800_000_000_000;
const TTL = 660_000;

describe("the nonce ledger", () => {
  it("takes a nonce once until it expires, per signer", async () => {
    await runInDurableObject(w.flowStub(1, 1).stub, async (_instance, ds) => {
      const ledger = new NonceLedger(ds.storage);
      expect(await ledger.use("runner:1:2", "n1", TTL, T)).toBe(true);
      expect(await ledger.use("runner:1:2", "n1", TTL, T + 1)).toBe(false);
      expect(await ledger.use("runner:1:3", "n1", TTL, T + 1)).toBe(true);
      // A fresh object (memory gone) still knows it.
      expect(await new NonceLedger(ds.storage).use("runner:1:2", "n1", TTL, T + 2)).toBe(false);
      expect(await ledger.use("runner:1:2", "n1", TTL, T + TTL + 1)).toBe(true);
    });
  });

  it("sweeps expired nonces every 256 uses, keeping those still live", async () => {
    await runInDurableObject(w.flowStub(1, 2).stub, async (_instance, ds) => {
      const ledger = new NonceLedger(ds.storage);
      expect(await ledger.use("runner:1:2", "live", TTL, T)).toBe(true);
      for (let i = 0; i < 300; i++) expect(await ledger.use("runner:1:2", `n${i}`, 10, T + i)).toBe(true);
      const left = await ds.storage.list({ prefix: NONCE_PREFIX });
      // The sweep at the 256th use dropped what had expired by then; the live one stays.
      expect(left.size).toBeLessThan(100);
      expect(left.has(ledgerKey("runner:1:2", "live"))).toBe(true);
      expect(await ledger.use("runner:1:2", "live", TTL, T + 400)).toBe(false);
    });
  });
});
