import type { z } from "zod";
import type { FlowSubmissionInput } from "../flow/index.js";
import {
  ScheduleRun,
  ScheduleSummary,
  ScheduleView,
  type Page,
  type TemplateRef,
  type ScheduleCatchup,
  type ScheduleOverlap,
} from "../model/index.js";

/** What the schedule client needs of the coordinator client: a signed request. */
export interface Requester {
  request(
    method: string,
    path: string,
    body?: unknown,
    extras?: { headers?: Record<string, string> },
  ): Promise<unknown>;
}

/** `POST /v1/contexts/{c}/schedules` as a caller writes it (defaults left out). */
export interface ScheduleCreationInput {
  /** The flow each fire starts: a flow submission without `id` and `start`. */
  template?: Omit<FlowSubmissionInput, "id" | "start">;
  /** Instead of `template`: a stored template each fire starts (its version, else the latest at the fire). */
  from_template?: z.input<typeof TemplateRef>;
  cron?: string;
  timezone?: string;
  interval_seconds?: number;
  overlap?: ScheduleOverlap;
  catchup?: Partial<ScheduleCatchup>;
  paused?: boolean;
  note?: string;
}

/**
 * Recurring flows through the API (docs/schedules.md): `client.schedules.create(…)` and the rest,
 * each answer parsed with the model's schema.
 */
export class ScheduleClient {
  constructor(private readonly client: Requester) {}

  private path(contextId: number, scheduleId?: number, action?: string): string {
    const base = `/v1/contexts/${contextId}/schedules`;
    return `${base}${scheduleId === undefined ? "" : `/${scheduleId}`}${action ? `/${action}` : ""}`;
  }

  /** Creates a schedule (admins); its first fire comes at its next fire time. */
  async create(
    contextId: number,
    input: ScheduleCreationInput,
    options: { idempotencyKey?: string } = {},
  ): Promise<ScheduleView> {
    const headers: Record<string, string> = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
    return ScheduleView.parse(await this.client.request("POST", this.path(contextId), input, { headers }));
  }

  /** A page of a context's schedules by id (readers). */
  async list(contextId: number, page: { offset?: number; limit?: number } = {}): Promise<Page<ScheduleSummary>> {
    const search = new URLSearchParams(
      Object.entries(page).flatMap(([k, v]) => (v === undefined ? [] : [[k, String(v)]])),
    ).toString();
    const answer = (await this.client.request("GET", `${this.path(contextId)}${search ? `?${search}` : ""}`)) as Page<
      z.input<typeof ScheduleSummary>
    >;
    return { ...answer, items: answer.items.map((item) => ScheduleSummary.parse(item)) };
  }

  /** One schedule with its recent runs, newest first (readers). */
  async get(contextId: number, scheduleId: number): Promise<ScheduleView> {
    return ScheduleView.parse(await this.client.request("GET", this.path(contextId, scheduleId)));
  }

  /** Pauses a schedule (admins): nothing fires until resumed. */
  async pause(contextId: number, scheduleId: number): Promise<ScheduleView> {
    return ScheduleView.parse(await this.client.request("POST", this.path(contextId, scheduleId, "pause")));
  }

  /** Resumes a schedule (admins); fires that fell in the pause are not caught up. */
  async resume(contextId: number, scheduleId: number): Promise<ScheduleView> {
    return ScheduleView.parse(await this.client.request("POST", this.path(contextId, scheduleId, "resume")));
  }

  /** Fires a schedule now through its overlap policy (admins); answers what became of the fire. */
  async trigger(contextId: number, scheduleId: number): Promise<ScheduleRun> {
    return ScheduleRun.parse(await this.client.request("POST", this.path(contextId, scheduleId, "trigger")));
  }

  /** Deletes a schedule (admins); deleting one that is gone succeeds too. */
  async delete(contextId: number, scheduleId: number): Promise<void> {
    await this.client.request("DELETE", this.path(contextId, scheduleId));
  }
}
