import { signRequest } from "../../shared/auth/sign.js";
import { loadSession, type Session } from "../src/keystore.js";

/**
 * The API reference at /docs/: Scalar rendering the Worker's own /openapi.json. What Scalar would
 * fetch from scalar.com is turned off (its default fonts, its request proxy, its AI agent, which
 * reads a registry of other APIs), so the page loads nothing from anywhere but this Worker, and
 * "Test Request" goes straight to it.
 *
 * Every /v1 route wants an RFC 9421 signature, which Scalar cannot make. This page shares the
 * console's origin, so it can use the key the console keeps (IndexedDB, a non-extractable
 * WebCrypto key that only signs): each request Scalar sends is signed here, as the console signs
 * its own (shared/auth's signRequest), just before it leaves. Without a signed-in console the
 * requests go unsigned, and the banner above the reference says so.
 */

interface ScalarGlobal {
  createApiReference(selector: string, configuration: Record<string, unknown>): unknown;
}

declare const Scalar: ScalarGlobal;

/** The request Scalar is about to send, signed as the console's actor (a placeholder header Scalar set dropped). */
async function signed(request: Request, session: Session): Promise<Request> {
  const headers = new Headers(request.headers);
  headers.delete("signature");
  headers.delete("signature-input");
  const body = ["GET", "HEAD"].includes(request.method) ? undefined : await request.arrayBuffer();
  const bare = new Request(request.url, { method: request.method, headers, ...(body ? { body } : {}) });
  return signRequest(bare, session);
}

/** Says on the page whether "Test Request" will sign, and as whom. */
function showSigning(session: Session | undefined): void {
  const banner = document.getElementById("signing");
  if (!banner) return;
  const console = Object.assign(document.createElement("a"), { href: "/console/", textContent: "the web console" });
  banner.dataset.signing = session ? "signed" : "unsigned";
  banner.replaceChildren(
    ...(session
      ? [`Test Request signs as actor ${session.actorId}, with the key `, console, " holds in this browser."]
      : [
          "Test Request cannot sign: sign in to ",
          console,
          " in this browser first, and its key signs the requests sent from here. Unsigned, /v1 routes answer 401.",
        ]),
  );
}

const session = await loadSession().catch(() => undefined);
showSigning(session);
Scalar.createApiReference("#reference", {
  url: "/openapi.json",
  withDefaultFonts: false,
  agent: { disabled: true },
  // Its developer toolbar offers to deploy the document to scalar.com: not for this page.
  showDeveloperTools: "never",
  metaData: { title: "Flow coordinator API reference" },
  // Scalar sends the request its hook answers (or the one it made, for undefined).
  onBeforeRequest: async ({ request }: { request: Request }) =>
    session ? { request: await signed(request, session) } : undefined,
});
