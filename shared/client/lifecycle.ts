import { ContextDetails, type RetentionUpdate } from "../model/index.js";
import type { Requester } from "./schedules.js";

/** The data lifecycle: a context's retention, and deleting an ended flow now. */
export class LifecycleClient {
  constructor(private readonly client: Requester) {}

  /** Sets a context's retention: a number sets a part, null goes back to the default, an absent one stays. */
  async setRetention(contextId: number, update: RetentionUpdate): Promise<ContextDetails> {
    return ContextDetails.parse(await this.client.request("PUT", `/v1/contexts/${contextId}/retention`, update));
  }

  /** Deletes an ended flow with everything it owns (a running one: 409 naming its status). */
  async deleteFlow(contextId: number, flowId: number): Promise<void> {
    await this.client.request("DELETE", `/v1/contexts/${contextId}/flows/${flowId}`);
  }
}
