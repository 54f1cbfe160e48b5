import type { z } from "zod";
import {
  actorKeyId,
  bareKeyId,
  importPrivateKey,
  KEY_DIRECTORY_PATH,
  signRequest,
  type PrivateJwk,
  type RequestSigner,
} from "../auth/index.js";
import type { FlowSubmissionInput, RerunRequest } from "../flow/index.js";
import type { EventInput } from "../model/index.js";
import {
  Actor,
  Context,
  ContextDetails,
  ContextStreamEvent,
  DeadLetter,
  EventSent,
  Flow,
  FlowDag,
  FlowStreamEvent,
  FlowView,
  JobView,
  Runner,
  RunnerJob,
  RunnerWithDispatch,
  type ActorRegistration,
  type Page,
  type ActorUpdate,
  type ContextCreation,
  type ContextLimitsUpdate,
  type PermissionsUpdate,
  type RunnerRegistration,
  type RunnerUpdate,
  WhoAmI,
} from "../model/index.js";
import type { PermissionList } from "../auth/index.js";
import { ApiError, readAnswer, type RpcErrorObject } from "./errors.js";
import { followStream, type StreamOptions, type StreamSource } from "./events.js";
import { reportsPath, type RunnerReport, type RunnerReportAnswer } from "./reports.js";
import { LifecycleClient } from "./lifecycle.js";
import { searchOf, type FlowListOptions, type PageQuery } from "./query.js";
import { ScheduleClient } from "./schedules.js";
import { TemplateClient } from "./templates.js";

export type Fetcher = (request: Request) => Promise<Response>;

/** A job outside any flow as its routes answer it: the record, with its live status while it runs. */
const JobWithStatus = RunnerJob.extend({ live: JobView.optional() });
export type JobWithStatus = z.infer<typeof JobWithStatus>;

export interface ClientOptions {
  /** The coordinator's base URL, e.g. `https://coordinator.example` (no trailing path). */
  baseUrl: string;
  /** Signs every request; without one only public routes work. */
  signer?: RequestSigner;
  /** Sends a request; `fetch` by default (tests pass the Worker's own handler). */
  fetch?: Fetcher;
}

/** What a request carries besides its body: extra signatures, extra headers. */
export interface RequestExtras {
  countersigners?: Countersigner[];
  headers?: Record<string, string>;
}

/** An extra signature to add under a label (an operator's, a new key's). */
export interface Countersigner {
  label: string;
  signer: RequestSigner;
}

/** A signer from a private JWK under a keyid. */
export async function signerFromJwk(jwk: PrivateJwk, keyid: string): Promise<RequestSigner> {
  return { keyid, key: await importPrivateKey(jwk) };
}

/**
 * The typed API client: signs every request (RFC 9421, Ed25519), parses every answer with the
 * model's schema, and turns problem documents into ApiError.
 */
export class CoordinatorClient {
  private readonly baseUrl: string;
  private readonly send: Fetcher;
  /** Recurring flows: create, list, get, pause, resume, trigger, delete schedules. */
  readonly schedules = new ScheduleClient(this);
  /** Retention, and deleting an ended flow. */
  readonly lifecycle = new LifecycleClient(this);
  /** Flow templates: put, list, get, version, start, delete. */
  readonly templates = new TemplateClient(this);

  constructor(private readonly options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.send = options.fetch ?? ((request) => fetch(request));
  }

  /** The same client signing as someone else. */
  as(signer: RequestSigner): CoordinatorClient {
    return new CoordinatorClient({ ...this.options, signer });
  }

  /** Sends a signed request and returns the parsed JSON answer (undefined for 204). */
  async request(method: string, path: string, body?: unknown, extras: RequestExtras = {}): Promise<unknown> {
    return readAnswer(await this.send(await this.signed(method, path, body, extras)));
  }

  /** A request to `path`, signed (with a fresh nonce: every request, a retried one too, is signed anew). */
  private async signed(method: string, path: string, body?: unknown, extras: RequestExtras = {}): Promise<Request> {
    const { countersigners = [], headers = {} } = extras;
    let request = new Request(`${this.baseUrl}${path}`, {
      method,
      headers: body === undefined ? headers : { ...headers, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (this.options.signer) request = await signRequest(request, this.options.signer);
    for (const { label, signer } of countersigners) request = await signRequest(request, signer, { label });
    return request;
  }

  // Operations without a signature.

  async health(): Promise<unknown> {
    return readAnswer(await this.send(new Request(`${this.baseUrl}/health`)));
  }

  async coordinatorKeys(): Promise<{ keys: { kid: string; x: string; status: string }[] }> {
    const res = await this.send(new Request(`${this.baseUrl}${KEY_DIRECTORY_PATH}`));
    return (await readAnswer(res)) as { keys: { kid: string; x: string; status: string }[] };
  }

  // Actors.

  /** Registers the actor owning `jwk`: signed by the bare key (proof of possession), and an operator when asked. */
  async registerActor(
    jwk: PrivateJwk,
    input: Omit<ActorRegistration, "pubkey"> = {},
    operator?: RequestSigner,
  ): Promise<Actor> {
    const self = this.as(await signerFromJwk(jwk, bareKeyId(jwk.x)));
    const countersigners = operator ? [{ label: "operator", signer: operator }] : [];
    return Actor.parse(await self.request("POST", "/v1/actors", { ...input, pubkey: jwk.x }, { countersigners }));
  }

  /** Who the signing key belongs to (`GET /v1/whoami`): its actor, its runners (by context), or nobody. */
  async whoAmI(): Promise<WhoAmI> {
    return WhoAmI.parse(await this.request("GET", "/v1/whoami"));
  }

  async loadActor(id: number): Promise<Actor> {
    return Actor.parse(await this.request("GET", `/v1/actors/${id}`));
  }

  async updateActor(id: number, input: ActorUpdate): Promise<Actor> {
    return Actor.parse(await this.request("PATCH", `/v1/actors/${id}`, input));
  }

  /** Replaces actor `id`'s key with `next`; returns the actor and a client signing with the new key. */
  async rotateKey(id: number, next: PrivateJwk): Promise<{ actor: Actor; client: CoordinatorClient }> {
    const countersigner = await signerFromJwk(next, bareKeyId(next.x));
    const actor = Actor.parse(
      await this.request(
        "PUT",
        `/v1/actors/${id}/key`,
        { pubkey: next.x },
        { countersigners: [{ label: "new-key", signer: countersigner }] },
      ),
    );
    return { actor, client: this.as(await signerFromJwk(next, actorKeyId(id))) };
  }

  // Contexts.

  async createContext(input: ContextCreation = {}): Promise<Context> {
    return Context.parse(await this.request("POST", "/v1/contexts", input));
  }

  /** A context with the retention in force and what it stores. */
  async loadContext(id: number): Promise<ContextDetails> {
    return ContextDetails.parse(await this.request("GET", `/v1/contexts/${id}`));
  }

  async setPermissions(id: number, input: PermissionsUpdate): Promise<Context> {
    return Context.parse(await this.request("PUT", `/v1/contexts/${id}/permissions`, input));
  }

  async grant(id: number, list: PermissionList, actorId: number): Promise<Context> {
    return Context.parse(await this.request("PUT", `/v1/contexts/${id}/permissions/${list}/${actorId}`));
  }

  async revoke(id: number, list: PermissionList, actorId: number): Promise<Context> {
    return Context.parse(await this.request("DELETE", `/v1/contexts/${id}/permissions/${list}/${actorId}`));
  }

  /** Deletes a context; false while the rest of it is still being removed in the background. */
  async deleteContext(id: number): Promise<boolean> {
    return (await this.request("DELETE", `/v1/contexts/${id}`)) === undefined;
  }

  // Runners.

  async createRunner(contextId: number, input: RunnerRegistration): Promise<Runner> {
    return Runner.parse(await this.request("POST", `/v1/contexts/${contextId}/runners`, input));
  }

  async listRunners(contextId: number, page: PageQuery = {}): Promise<Page<Runner>> {
    return this.page(`/v1/contexts/${contextId}/runners`, page, Runner);
  }

  /** A runner, with how dispatch stands with it (attempts held, delivery trouble). */
  async loadRunner(contextId: number, id: number): Promise<RunnerWithDispatch> {
    return RunnerWithDispatch.parse(await this.request("GET", `/v1/contexts/${contextId}/runners/${id}`));
  }

  async updateRunner(contextId: number, id: number, input: RunnerUpdate): Promise<Runner> {
    return Runner.parse(await this.request("PATCH", `/v1/contexts/${contextId}/runners/${id}`, input));
  }

  async deleteRunner(contextId: number, id: number): Promise<void> {
    await this.request("DELETE", `/v1/contexts/${contextId}/runners/${id}`);
  }

  // Flows.

  /** Submits a flow (`start: true` starts it); under `idempotencyKey` a retry answers the first one's flow. */
  async submitFlow(
    contextId: number,
    input: FlowSubmissionInput,
    options: { idempotencyKey?: string } = {},
  ): Promise<FlowView> {
    const headers: Record<string, string> = options.idempotencyKey ? { "idempotency-key": options.idempotencyKey } : {};
    return FlowView.parse(await this.request("POST", `/v1/contexts/${contextId}/flows`, input, { headers }));
  }

  /** A flow with every job's live status. */
  async loadFlow(contextId: number, flowId: number): Promise<FlowView> {
    return FlowView.parse(await this.request("GET", `/v1/contexts/${contextId}/flows/${flowId}`));
  }

  /** A page of a context's flows, narrowed as FlowListOptions says. */
  async listFlows(contextId: number, query: FlowListOptions = {}): Promise<Page<Flow>> {
    return this.page(`/v1/contexts/${contextId}/flows`, query, Flow);
  }

  async startFlow(contextId: number, flowId: number): Promise<FlowView> {
    return FlowView.parse(await this.request("POST", `/v1/contexts/${contextId}/flows/${flowId}/start`));
  }

  /** The flow's jobs as nodes and edges, with their statuses (herocoordinator's `flow.dag`). */
  async flowDag(contextId: number, flowId: number): Promise<FlowDag> {
    return FlowDag.parse(await this.request("GET", `/v1/contexts/${contextId}/flows/${flowId}/dag`));
  }

  /** Stops a flow (its in-flight jobs' runners are told); with `compensate`, a flow with compensations unwinds. */
  async cancelFlow(contextId: number, flowId: number, reason?: string, compensate = false): Promise<FlowView> {
    const body = { ...(reason ? { reason } : {}), ...(compensate ? { compensate } : {}) };
    return FlowView.parse(await this.request("POST", `/v1/contexts/${contextId}/flows/${flowId}/cancel`, body));
  }

  /**
   * Sends an event to a context's waits (as an executor of the context, or one of its runners):
   * every wait for its name and key finishes with `data`. Give an `id` to make it idempotent:
   * sending it again (after a lost answer) is the same event, answered `duplicate`.
   */
  async sendEvent(contextId: number, event: z.input<typeof EventInput>): Promise<EventSent> {
    return EventSent.parse(await this.request("POST", `/v1/contexts/${contextId}/events`, event));
  }

  /**
   * Runs a flow again. Without `options`, a failed flow from its failed jobs (finished jobs keep
   * their results). With `from` (a job's id or name) and the `run` it replaces (the view's `run`),
   * a flow that ended from that job and everything downstream of it; `env_vars` go over the
   * flow's env. A flow no longer at `run` (a repeated call) is an ApiError 409: never run twice.
   */
  async rerunFlow(contextId: number, flowId: number, options?: z.input<typeof RerunRequest>): Promise<FlowView> {
    const path = `/v1/contexts/${contextId}/flows/${flowId}/rerun`;
    return FlowView.parse(await this.request("POST", path, options));
  }

  /**
   * Stops a job run outside any flow (`callerId` submitted it), as cancelFlow stops a flow. One
   * that already ended is an ApiError 409 naming its status (`job_status`), a retried cancel too.
   */
  async cancelJob(contextId: number, callerId: number, jobId: number, reason?: string): Promise<JobWithStatus> {
    const path = `/v1/contexts/${contextId}/jobs/${callerId}/${jobId}/cancel`;
    return JobWithStatus.parse(await this.request("POST", path, reason ? { reason } : {}));
  }

  /** Runs a failed job outside any flow again with fresh retries (409 when it did not fail). */
  async rerunJob(contextId: number, callerId: number, jobId: number): Promise<JobWithStatus> {
    return JobWithStatus.parse(await this.request("POST", `/v1/contexts/${contextId}/jobs/${callerId}/${jobId}/rerun`));
  }

  // Event streams.

  /**
   * A flow's events as they happen (Server-Sent Events), from after `since` (a FlowView's
   * `last_seq`); reconnects on a dropped connection, never yielding an event twice. Never ends by
   * itself (a re-run may add events): abort `signal` or break out of the loop.
   */
  flowEvents(contextId: number, flowId: number, options: StreamOptions = {}): AsyncGenerator<FlowStreamEvent> {
    const path = `/v1/contexts/${contextId}/flows/${flowId}/events`;
    return followStream(this.stream(path, `the event stream of flow ${flowId}`), FlowStreamEvent, options);
  }

  /** Every flow's `flow.*` events in a context, numbered in the context's own sequence (see flowEvents). */
  contextEvents(contextId: number, options: StreamOptions = {}): AsyncGenerator<ContextStreamEvent> {
    const path = `/v1/contexts/${contextId}/events`;
    return followStream(this.stream(path, `the event stream of context ${contextId}`), ContextStreamEvent, options);
  }

  /** Opens `path` as an event stream: each connection a signed GET, resuming with `Last-Event-ID`. */
  private stream(path: string, label: string): StreamSource {
    return {
      label,
      open: async (since, signal) => {
        const headers: Record<string, string> = { accept: "text/event-stream" };
        if (since !== undefined) headers["last-event-id"] = String(since);
        // Signing builds a new Request: the signal goes on afterwards.
        return this.send(new Request(await this.signed("GET", path, undefined, { headers }), { signal }));
      },
    };
  }

  // Dispatch and dead letters.

  /** Holds (`paused: true`) or lets go on (`false`) all dispatch of a context. */
  async setPaused(contextId: number, paused: boolean): Promise<{ context_id: number; paused: boolean }> {
    return (await this.request("POST", `/v1/contexts/${contextId}/${paused ? "pause" : "resume"}`)) as {
      context_id: number;
      paused: boolean;
    };
  }

  /** Sets a context's limits: a number sets one, null lifts it, an absent one stays. */
  async setLimits(contextId: number, limits: ContextLimitsUpdate): Promise<Context> {
    return Context.parse(await this.request("PUT", `/v1/contexts/${contextId}/limits`, limits));
  }

  /** What the coordinator gave up on in a context, newest first (at most the context's cap of them). */
  async listDeadLetters(contextId: number, page: PageQuery = {}): Promise<Page<DeadLetter>> {
    return this.page(`/v1/contexts/${contextId}/deadletters`, page, DeadLetter);
  }

  async loadDeadLetter(contextId: number, id: string): Promise<DeadLetter> {
    return DeadLetter.parse(
      await this.request("GET", `/v1/contexts/${contextId}/deadletters/${encodeURIComponent(id)}`),
    );
  }

  /** Deletes a dead letter (admins); one already gone is no error (the same answer). */
  async deleteDeadLetter(contextId: number, id: string): Promise<void> {
    await this.request("DELETE", `/v1/contexts/${contextId}/deadletters/${encodeURIComponent(id)}`);
  }

  /** GETs a page of a list route, each item parsed by `schema`. */
  private async page<T>(path: string, query: FlowListOptions, schema: z.ZodType<T>): Promise<Page<T>> {
    const search = searchOf(query);
    const answer = (await this.request("GET", `${path}${search ? `?${search}` : ""}`)) as Page<unknown>;
    return { ...answer, items: answer.items.map((item) => schema.parse(item)) };
  }

  // Runners.

  /** A runner's batch of reports, signed once; one answer per report, in order. */
  async reportBatch(contextId: number, runnerId: number, reports: RunnerReport[]): Promise<RunnerReportAnswer[]> {
    const answer = (await this.request("POST", reportsPath(contextId, runnerId), { reports })) as {
      answers: RunnerReportAnswer[];
    };
    return answer.answers;
  }

  // JSON-RPC.

  /** Calls a JSON-RPC 2.0 method on `/rpc`; a JSON-RPC error becomes an ApiError. */
  async rpc<T = unknown>(method: string, params: unknown, schema?: z.ZodType<T>): Promise<T> {
    const answer = (await this.request("POST", "/rpc", { jsonrpc: "2.0", id: 1, method, params })) as RpcAnswer;
    if ("error" in answer) throw rpcError(answer.error);
    return schema ? schema.parse(answer.result) : (answer.result as T);
  }
}

type RpcAnswer =
  { jsonrpc: "2.0"; id: unknown; result: unknown } | { jsonrpc: "2.0"; id: unknown; error: RpcErrorObject };

function rpcError(error: RpcErrorObject): ApiError {
  const problem = error.data ?? { type: "about:blank", title: error.message, status: 500 };
  return Object.assign(new ApiError(problem.status, problem), { rpcCode: error.code });
}
