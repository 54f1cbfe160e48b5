import { generateKeyPair, runnerKeyId, type PrivateJwk } from "../../shared/auth/index.js";
import { ApiError, type CoordinatorClient } from "../../shared/client/index.js";
import type { DeliveryPayload, FlowView } from "../../shared/model/index.js";
import type { testWorker } from "./harness.js";

type Worker = ReturnType<typeof testWorker>;

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

  /** Registers a pull runner of `scriptTypes` in the context. */
  static async register(w: Worker, admin: CoordinatorClient, contextId: number, scriptTypes: ("sh" | "python")[] = ["sh", "python"]): Promise<PullRunner> {
    const jwk = await generateKeyPair();
    const runner = await admin.createRunner(contextId, { pubkey: jwk.x, runner_type: "sh", local: true, script_types: scriptTypes, concurrency: 100 });
    return new PullRunner(runner.id, contextId, jwk, await w.clientFor(jwk, runnerKeyId(contextId, runner.id)));
  }

  /** Leases until at least `atLeast` deliveries came (the relay runs just after a commit). */
  async leaseSome(atLeast = 1, max = 100): Promise<DeliveryPayload[]> {
    const got: DeliveryPayload[] = [];
    for (let round = 0; round < 100 && got.length < atLeast; round++) {
      got.push(...(await this.lease(max)));
      if (got.length < atLeast) await new Promise((r) => setTimeout(r, 20));
    }
    return got;
  }

  async lease(max = 100): Promise<DeliveryPayload[]> {
    const answer = (await this.client.request("POST", `/v1/contexts/${this.contextId}/runners/${this.id}/lease`, { max })) as { deliveries: DeliveryPayload[] };
    return answer.deliveries;
  }

  /** POSTs a webhook of a delivery; returns the answer, or the ApiError it failed with. */
  async report(d: DeliveryPayload, event: "ack" | "started" | "heartbeat" | "result" | "logs", body: Record<string, unknown> = {}): Promise<unknown> {
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

/** Loads a flow's live view. */
export function flowOf(admin: CoordinatorClient, contextId: number, flowId: number): Promise<FlowView> {
  return admin.request("GET", `/v1/contexts/${contextId}/flows/${flowId}`) as Promise<FlowView>;
}
