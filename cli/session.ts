import { actorKeyId, type PrivateJwk } from "../shared/auth/index.js";
import { CoordinatorClient, signerFromJwk, type Fetcher } from "../shared/client/index.js";
import { contextAndId, parseId, type Invocation } from "./command.js";
import { requireActorId, requireKeyFile, requireUrl, resolveConfig, type ResolvedConfig } from "./config.js";
import { NetworkError } from "./errors.js";
import { readPrivateKey } from "./keyfile.js";

/** How long one request may take before the CLI gives up on the coordinator. */
const REQUEST_TIMEOUT_MS = 30_000;

/** A client ready to use, with the settings and key it was made from. */
export interface Session {
  config: ResolvedConfig;
  url: string;
  /** Absolute path of the key file `jwk` was read from. */
  keyFile: string;
  jwk: PrivateJwk;
  client: CoordinatorClient;
}

/** An actor's session: requests are signed as `actor:<id>`. */
export interface ActorSession extends Session {
  actorId: number;
}

/**
 * Sends requests with a deadline, and tells "could not reach the coordinator" apart from "the
 * coordinator said no": the former becomes a NetworkError naming the URL. An event stream's
 * deadline covers its answer's headers only: its body lasts as long as the caller reads it
 * (and the request's own signal ends it).
 */
export function networkFetch(url: string, hooks: SessionHooks = {}): Fetcher {
  return async (request) => {
    const stream = request.headers.get("accept") === "text/event-stream";
    const deadline = new AbortController();
    const timer = setTimeout(
      () => deadline.abort(new DOMException("no answer in time", "TimeoutError")),
      REQUEST_TIMEOUT_MS,
    );
    // An ordinary request's deadline runs on while its body is read; it must not keep the CLI alive.
    timer.unref();
    let response: Response;
    try {
      response = await fetch(request, { signal: AbortSignal.any([request.signal, deadline.signal]) });
    } catch (error) {
      clearTimeout(timer);
      throw new NetworkError(url, request.signal.aborted ? request.signal.reason : error);
    }
    if (stream) clearTimeout(timer);
    hooks.onResponse?.(response);
    return response;
  };
}

/** How a command learns more of an answer than the typed client returns. */
export interface SessionHooks {
  /** Sees each response before it is read (the typed client hides 200 vs 201). */
  onResponse?: (response: Response) => void;
}

/**
 * A session for one's own key without an actor id: only good for registering it, which signs
 * with the bare key (`key:<pubkey>`) by itself.
 */
export function keySession(invocation: Invocation, commandName: string): Session {
  const config = resolveConfig(invocation.globals, invocation.env, invocation.cwd, commandName);
  const url = requireUrl(config);
  const keyFile = requireKeyFile(config);
  const jwk = readPrivateKey(keyFile.value, keyFile.source);
  return {
    config,
    url,
    keyFile: keyFile.value,
    jwk,
    client: new CoordinatorClient({ baseUrl: url, fetch: networkFetch(url) }),
  };
}

/** A session signing as the configured actor; the settings are checked before any key is read. */
export async function actorSession(
  invocation: Invocation,
  commandName: string,
  hooks: SessionHooks = {},
): Promise<ActorSession> {
  const config = resolveConfig(invocation.globals, invocation.env, invocation.cwd, commandName);
  const url = requireUrl(config);
  const keyFile = requireKeyFile(config);
  const actorId = requireActorId(config);
  const jwk = readPrivateKey(keyFile.value, keyFile.source);
  const signer = await signerFromJwk(jwk, actorKeyId(actorId));
  return {
    config,
    url,
    keyFile: keyFile.value,
    jwk,
    actorId,
    client: new CoordinatorClient({ baseUrl: url, signer, fetch: networkFetch(url, hooks) }),
  };
}

/**
 * The context a command works in (its first argument) and a session signing as the configured
 * actor. The argument is checked first: a mistyped id is told before the settings are looked at.
 */
export async function contextSession(
  invocation: Invocation,
  commandName: string,
): Promise<{ contextId: number; session: ActorSession }> {
  const contextId = parseId(invocation.args[0] ?? "", "<context>", commandName);
  return { contextId, session: await actorSession(invocation, commandName) };
}

/**
 * The `<context> <id>` a command on one object takes (`label` names the id in errors, e.g.
 * `<flow>`) and a session signing as the configured actor, the arguments checked first.
 */
export async function objectSession(
  invocation: Invocation,
  label: string,
  commandName: string,
): Promise<{ contextId: number; id: number; session: ActorSession }> {
  const { contextId, id } = contextAndId(invocation, label, commandName);
  return { contextId, id, session: await actorSession(invocation, commandName) };
}
