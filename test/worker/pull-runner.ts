import { generateKeyPair, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { ApiError, type CoordinatorClient } from "../../shared/client/index.js";
import type { DeliveryPayload } from "../../shared/model/index.js";
import { eventually } from "../support/eventually.js";
import type { TestWorker } from "./harness.js";

/**
 * A pull runner driven step by step by a test, through the real API: it leases deliveries and
 * reports on them with signed webhooks, so a test can replay, reorder or delay any report.
 */
export class PullRunner {
  private constructor(
    readonly id: number,
    readonly contextId: number,
    readonly jwk: PrivateJwk,
    readonly client: CoordinatorClient,
  ) {}

  /** Registers a pull runner of `scriptTypes` in the context, of `concurrency` (100 unless given). */
  static async register(
    w: TestWorker,
    admin: CoordinatorClient,
    contextId: number,
    scriptTypes: ("sh" | "python")[] = ["sh", "python"],
    concurrency = 100,
  ): Promise<PullRunner> {
    const jwk = await generateKeyPair();
    const runner = await admin.createRunner(contextId, {
      pubkey: jwk.x,
      runner_type: "sh",
      local: true,
      script_types: scriptTypes,
      concurrency,
    });
    return new PullRunner(runner.id, contextId, jwk, await w.clientFor(jwk, runnerKeyId(contextId, runner.id)));
  }

  /**
   * Registers `old` again, same id and key, in a context that lost it (its Redis was flushed):
   * the same runner as far as anyone can tell.
   */
  static async again(w: TestWorker, admin: CoordinatorClient, old: PullRunner): Promise<PullRunner> {
    const runner = await admin.createRunner(old.contextId, {
      id: old.id,
      pubkey: old.jwk.x,
      runner_type: "sh",
      local: true,
      script_types: ["sh", "python"],
      concurrency: 100,
    });
    return new PullRunner(
      runner.id,
      old.contextId,
      old.jwk,
      await w.clientFor(old.jwk, runnerKeyId(old.contextId, runner.id)),
    );
  }

  /**
   * Leases until at least `atLeast` deliveries came (the relay runs just after a commit, in the
   * flow's Durable Object); fails if they do not come within 10 s.
   */
  async leaseSome(atLeast = 1, max = 100): Promise<DeliveryPayload[]> {
    const got: DeliveryPayload[] = [];
    return eventually(
      async () => {
        got.push(...(await this.lease(max)));
        return got.length >= atLeast ? got : undefined;
      },
      10_000,
      20,
      `${atLeast} deliveries to runner ${this.id}`,
    );
  }

  async lease(max = 100): Promise<DeliveryPayload[]> {
    const answer = (await this.client.request("POST", `/v1/contexts/${this.contextId}/runners/${this.id}/lease`, {
      max,
    })) as { deliveries: DeliveryPayload[] };
    return answer.deliveries;
  }

  /** POSTs a webhook of a delivery; returns the answer, or the ApiError it failed with. */
  async report(
    d: DeliveryPayload,
    event: "ack" | "started" | "heartbeat" | "result" | "logs",
    body: Record<string, unknown> = {},
  ): Promise<unknown> {
    const url = new URL(d.callbacks[event]);
    return this.client.request("POST", url.pathname, { attempt: d.attempt, ...body }).catch((e: unknown) => {
      if (e instanceof ApiError) return e;
      throw e;
    });
  }

  async finish(d: DeliveryPayload, result: Record<string, string> = {}): Promise<unknown> {
    await this.report(d, "ack");
    await this.report(d, "started");
    return this.report(d, "result", { status: "finished", result });
  }

  async fail(d: DeliveryPayload, error: string): Promise<unknown> {
    await this.report(d, "ack");
    return this.report(d, "result", { status: "error", error });
  }
}

/** The name of a delivery's job. */
export function jobName(d: DeliveryPayload): string {
  return d.message.job[0]?.name ?? String(d.job_id);
}
