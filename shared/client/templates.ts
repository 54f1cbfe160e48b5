import type { z } from "zod";
import type { TemplateFileInput } from "../flow/index.js";
import {
  FlowView,
  TemplatePut,
  TemplateSummary,
  TemplateVersion,
  TemplateView,
  type Page,
  type TemplateStartInput,
} from "../model/index.js";
import type { Requester } from "./schedules.js";

/**
 * Flow templates through the API (docs/templates.md): `client.templates.put(…)` and the rest,
 * each answer parsed with the model's schema.
 */
export class TemplateClient {
  constructor(private readonly client: Requester) {}

  private path(contextId: number, name?: string, rest = ""): string {
    const base = `/v1/contexts/${contextId}/templates`;
    return name === undefined ? base : `${base}/${encodeURIComponent(name)}${rest}`;
  }

  /**
   * Stores `file` as the template's next version (admins); the same file as the latest makes
   * none and answers that version with `created: false`.
   */
  async put(contextId: number, name: string, file: TemplateFileInput): Promise<TemplatePut> {
    return TemplatePut.parse(await this.client.request("PUT", this.path(contextId, name), file));
  }

  /** A page of a context's templates by name (readers). */
  async list(contextId: number, page: { offset?: number; limit?: number } = {}): Promise<Page<TemplateSummary>> {
    const search = new URLSearchParams(
      Object.entries(page).flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)]])),
    ).toString();
    const answer = (await this.client.request("GET", `${this.path(contextId)}${search ? `?${search}` : ""}`)) as Page<
      z.input<typeof TemplateSummary>
    >;
    return { ...answer, items: answer.items.map((item) => TemplateSummary.parse(item)) };
  }

  /** A template with every version it keeps, newest first (readers). */
  async get(contextId: number, name: string): Promise<TemplateView> {
    return TemplateView.parse(await this.client.request("GET", this.path(contextId, name)));
  }

  /** One version with its file; the latest without `version` (readers). */
  async version(contextId: number, name: string, version?: number): Promise<TemplateVersion> {
    const which = version === undefined ? "latest" : String(version);
    return TemplateVersion.parse(await this.client.request("GET", this.path(contextId, name, `/versions/${which}`)));
  }

  /**
   * Starts a flow from a template (admins): `version` (default the latest), `inputs`, `start`
   * (default true). With `idempotencyKey`, a retried start answers the flow the first one made.
   */
  async start(
    contextId: number,
    name: string,
    input: TemplateStartInput = {},
    options: { idempotencyKey?: string } = {},
  ): Promise<FlowView> {
    const headers: Record<string, string> = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
    return FlowView.parse(await this.client.request("POST", this.path(contextId, name, "/flows"), input, { headers }));
  }

  /** Deletes a template with every version (admins); deleting one that is gone succeeds too. */
  async delete(contextId: number, name: string): Promise<void> {
    await this.client.request("DELETE", this.path(contextId, name));
  }
}
