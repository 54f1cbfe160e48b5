/**
 * The front Worker of `npm run serve` (infra/serve/): what Cloudflare puts in front of a deployed
 * Worker, on plain workerd. Its default entrypoint listens on the public socket and serves the
 * static assets of wrangler.toml's `[assets]` (routing.ts) from a disk directory, handing every
 * other request to the coordinator's Worker, untouched. Its `Control` entrypoint listens on a
 * second socket, on the loopback interface only, and delivers the cron triggers to the Worker's
 * scheduled handler (`GET /__scheduled?cron=…`, as `wrangler dev --test-scheduled` does), since
 * workerd has no cron of its own. Not part of the coordinator's bundle: the bundle stays the one
 * `wrangler deploy` builds.
 */
import { WorkerEntrypoint } from "cloudflare:workers";
import {
  applyHeaderRules,
  decodePath,
  encodePath,
  intentFor,
  workerFirst,
  type AssetManifest,
  type FrontRouting,
} from "./routing.js";

interface Env {
  /** The coordinator's Worker (the bundle `wrangler deploy` builds). */
  WORKER: Fetcher & {
    /** Fetcher.scheduled (the compatibility flag `service_binding_extra_handlers`). */
    scheduled(options: { cron?: string; scheduledTime?: number }): Promise<{ outcome: string; noRetry: boolean }>;
  };
  /** The assets folder, as workerd's disk directory service. */
  ASSETS: Fetcher;
  MANIFEST: AssetManifest;
  ROUTING: FrontRouting;
}

/** What the asset worker tells browsers: keep it, but ask again each time (the ETag makes that a 304). */
const CACHE_CONTROL = "public, max-age=0, must-revalidate";
/** Content types worth compressing on the way out (workerd compresses when Content-Encoding is set). */
const COMPRESSIBLE = /^(text\/|application\/(json|javascript|xml|manifest\+json)|image\/svg\+xml)/;

/** An asset's response: its ETag, type and caching headers, 304 when the client has it, no body for HEAD. */
async function serveAsset(request: Request, env: Env, file: string): Promise<Response> {
  const asset = env.MANIFEST[file] as AssetManifest[string];
  const headers = new Headers({ ETag: `"${asset.etag}"`, "Content-Type": asset.type });
  if (!request.headers.has("Authorization") && !request.headers.has("Range"))
    headers.set("Cache-Control", CACHE_CONTROL);
  const ifNoneMatch = request.headers.get("If-None-Match") ?? "";
  if (ifNoneMatch === `"${asset.etag}"` || ifNoneMatch === `W/"${asset.etag}"`)
    return new Response(null, { status: 304, headers });
  if (request.method.toUpperCase() === "HEAD") return new Response(null, { status: 200, headers });
  const stored = await env.ASSETS.fetch(`http://assets${encodePath(file)}`);
  if (!stored.ok) throw new Error(`the asset ${file} is in the manifest but the folder answered ${stored.status}`);
  if (COMPRESSIBLE.test(asset.type) && /\bgzip\b/.test(request.headers.get("Accept-Encoding") ?? ""))
    headers.set("Content-Encoding", "gzip");
  return new Response(stored.body, { status: 200, headers });
}

/** An asset, a redirect to its canonical path, or 405; null when the path is no asset's (the Worker's). */
async function assetOrNull(request: Request, env: Env, url: URL): Promise<Response | null> {
  const decoded = decodePath(url.pathname);
  const intent = intentFor(decoded, env.MANIFEST);
  if (!intent) return null;
  const method = request.method.toUpperCase();
  if (method !== "GET" && method !== "HEAD")
    return new Response(null, { status: 405, statusText: "Method Not Allowed" });
  const destination = encodePath("redirect" in intent ? intent.redirect : decoded);
  if ("redirect" in intent || destination !== url.pathname)
    return new Response(null, { status: 307, headers: { Location: `${destination}${url.search}` } });
  return serveAsset(request, env, intent.serve);
}

/** The public socket: assets first (unless `run_worker_first` says otherwise), then the Worker. */
export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url = new URL(request.url);
    if (workerFirst(env.ROUTING.runWorkerFirst, url.pathname)) return env.WORKER.fetch(request);
    const asset = await assetOrNull(request, env, url);
    if (!asset) return env.WORKER.fetch(request);
    applyHeaderRules(env.ROUTING.headers, url.pathname, asset.headers);
    return asset;
  },
} satisfies ExportedHandler<Env>;

/**
 * The control socket (loopback only, never the public one): `GET /__scheduled?cron=<expr>` runs
 * the Worker's scheduled handler once, as Cloudflare's cron trigger would, and answers when the
 * handler has returned (its `waitUntil` work may still run).
 */
export class Control extends WorkerEntrypoint<Env> {
  override async fetch(request: Request): Promise<Response> {
    const url = new URL(request.url);
    if (url.pathname !== "/__scheduled") return new Response("not found\n", { status: 404 });
    const cron = url.searchParams.get("cron") ?? "";
    const result = await this.env.WORKER.scheduled({ cron, scheduledTime: Date.now() });
    const ok = result.outcome === "ok";
    return new Response(ok ? "Ran scheduled event\n" : `scheduled event: ${result.outcome}\n`, {
      status: ok ? 200 : 500,
    });
  }
}
