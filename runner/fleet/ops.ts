import { Hono, type Context } from "hono";
import { AuthError, verifyRequest } from "../../shared/auth/index.js";
import { readBoundedBody } from "../../shared/http/body.js";
import { NonceLedger, problem, serveApp, signedRequest, type PushServer } from "../push-server.js";

/** What a gateway or worker tells its operators. */
export interface FleetOps {
  /** NATS (and, for a gateway, the coordinator) reachable: `ok`, else what is not. */
  health(): Promise<{ ok: boolean } & Record<string, unknown>>;
  /** Takes work now: not draining, NATS connected, room for jobs. */
  ready(): Promise<{ ok: boolean } & Record<string, unknown>>;
  /** Prometheus exposition text. */
  metrics(): Promise<string>;
  info(): Promise<Record<string, unknown>>;
  /** Starts draining (idempotent); the process exits 0 once drained. */
  drain(): void;
  /** The runner's key id (`runner:<context>:<id>`) and public key: only it may drain. */
  admin: { keyid: string; key: CryptoKey };
  /** This process's id in the fleet (in `/info`): a drain must name it. */
  member: string;
}

/** How old a signed drain may be: short, since it stops a member. */
const DRAIN_SKEW_S = 60;

/**
 * Mounts `/health`, `/ready`, `/metrics`, `/info` (unsigned GETs: they tell state, change
 * nothing) and `POST /admin/drain` (signed by the runner's own key, RFC 9421 as everything else,
 * within a minute, its body `{"member": "<id>"}` naming this process: draining stops a fleet
 * member, so only whoever holds the runner's key may ask, and only of the member it names).
 */
export function mountOps(app: Hono, ops: FleetOps): void {
  const nonces = new NonceLedger((2 * DRAIN_SKEW_S + 60) * 1000);
  const status = async (c: Context, check: () => Promise<{ ok: boolean } & Record<string, unknown>>) => {
    const result = await check();
    return c.json(result, result.ok ? 200 : 503);
  };
  app.get("/health", (c) => status(c, () => ops.health()));
  app.get("/ready", (c) => status(c, () => ops.ready()));
  app.get("/metrics", async (c) =>
    c.body(await ops.metrics(), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" }),
  );
  app.get("/info", async (c) => c.json(await ops.info()));
  app.post("/admin/drain", async (c) => {
    const body = await readBoundedBody(c.req.raw, 64 * 1024);
    if (!body) return problem(c, 413, "too-large", "a drain request carries no body to speak of");
    try {
      const verified = await verifyRequest(signedRequest(c), {
        body,
        now: Math.floor(Date.now() / 1000),
        skewSeconds: DRAIN_SKEW_S,
        resolveKey: async (kid) => (kid === ops.admin.keyid ? ops.admin.key : null),
      });
      if (!nonces.use(`${verified.keyid} ${verified.nonce}`))
        return problem(c, 401, "nonce-replayed", "this signature's nonce was already used");
    } catch (error) {
      if (!(error instanceof AuthError)) throw error;
      return problem(c, 401, error.code, `${error.message} (sign with the runner's key, keyid ${ops.admin.keyid})`);
    }
    // The body names the member: a drain seen on its way cannot be replayed to the others.
    let member: unknown;
    try {
      member = (JSON.parse(new TextDecoder().decode(body)) as { member?: unknown } | null)?.member;
    } catch {
      member = undefined;
    }
    if (member !== ops.member)
      return problem(
        c,
        403,
        "wrong-member",
        `a drain names the member it stops ({"member": "${ops.member}"}, as /info shows)`,
      );
    ops.drain();
    return c.json({ draining: true }, 202);
  });
}

/** A standalone ops server (a worker, or a pulling gateway): the routes above on `host:port`. */
export function startOpsServer(ops: FleetOps, listen: { host: string; port: number }): Promise<PushServer> {
  const app = new Hono();
  mountOps(app, ops);
  app.notFound((c) => problem(c, 404, "not-found", "GET /health, /ready, /metrics, /info; POST /admin/drain"));
  return serveApp(app, listen);
}
