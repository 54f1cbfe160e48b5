import http from "node:http";
import { verifyRequest } from "../../shared/auth/index.js";

/**
 * True when connecting to `url` is refused (ECONNREFUSED): nothing listens there any more. False
 * when something answers; any other failure (a reset, a timeout of 10 s) is thrown, since it
 * says neither.
 */
export async function refusesConnections(url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    await res.arrayBuffer();
    return false;
  } catch (error) {
    if ((error as { cause?: { code?: unknown } }).cause?.code === "ECONNREFUSED") return true;
    throw error;
  }
}

/**
 * An HTTP server that takes only requests signed (RFC 9421, over the raw body) by a key
 * `resolveKey` knows, as a runner or an actor's https address must: it answers the others 401 and
 * hands the signed ones' raw bodies to `handle` (with the request, whose signature an answer may
 * be bound to), which writes the response.
 */
export function signedServer(
  resolveKey: (keyid: string) => Promise<CryptoKey | null>,
  handle: (body: Uint8Array, res: http.ServerResponse, request: Request) => void,
): http.Server {
  return http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      void (async () => {
        const body = new Uint8Array(Buffer.concat(chunks));
        const headers = new Headers(
          Object.entries(req.headers).flatMap(([k, v]) => (typeof v === "string" ? [[k, v] as [string, string]] : [])),
        );
        const request = new Request(`http://${req.headers.host}${req.url}`, {
          method: req.method ?? "POST",
          headers,
          body,
        });
        try {
          await verifyRequest(request, { body, now: Math.floor(Date.now() / 1000), skewSeconds: 300, resolveKey });
        } catch {
          res.writeHead(401).end();
          return;
        }
        handle(body, res, request);
      })();
    });
  });
}
