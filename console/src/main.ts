import { Api } from "./api.js";
import { fill, h, notify, refreshClocks, TIME_ZONE } from "./dom.js";
import { deleteSession, loadSession, type Session } from "./keystore.js";
import type { PageContext, PageHandle } from "./page.js";
import { contextsPage } from "./pages/contexts.js";
import { flowPage } from "./pages/flow.js";
import { flowsPage } from "./pages/flows.js";
import { deadLettersPage, runnersPage } from "./pages/runners.js";
import { schedulePage, schedulesPage } from "./pages/schedules.js";
import { templatePage, templatesPage } from "./pages/templates.js";
import { parseRoute, href, type Route } from "./routes.js";
import { signInPage } from "./signin.js";

/**
 * The console's shell: signs in (or finds the key kept from last time), then draws the page the
 * URL's fragment names, and draws again when it changes. Leaving a page aborts its signal, which
 * closes its event streams and stops its timers.
 */

const main = document.getElementById("main") as HTMLElement;
const who = document.getElementById("who") as HTMLElement;

let session: Session | undefined;
let current: { controller: AbortController; handle: PageHandle | void } | undefined;

function leave(): void {
  current?.controller.abort();
  current = undefined;
}

function draw(route: Route): void {
  if (!session) return;
  if (current?.handle?.onRoute?.(route)) return;
  leave();
  const controller = new AbortController();
  const ctx: PageContext = { api: new Api(session), session, main, signal: controller.signal };
  let handle: PageHandle | void = undefined;
  switch (route.page) {
    case "contexts":
      contextsPage(ctx);
      break;
    case "flows":
      flowsPage(ctx, route.contextId, route);
      break;
    case "flow":
      handle = flowPage(ctx, route.contextId, route.flowId, route.jobId);
      break;
    case "runners":
      runnersPage(ctx, route.contextId);
      break;
    case "deadletters":
      deadLettersPage(ctx, route.contextId);
      break;
    case "templates":
      templatesPage(ctx, route.contextId);
      break;
    case "template":
      templatePage(ctx, route.contextId, route.name);
      break;
    case "schedules":
      schedulesPage(ctx, route.contextId);
      break;
    case "schedule":
      schedulePage(ctx, route.contextId, route.scheduleId);
      break;
    case "missing":
      main.replaceChildren(
        h("h1", {}, "No such page"),
        h("p", {}, `Nothing is at ${route.hash}. `, h("a", { href: href({ page: "contexts" }) }, "Your contexts")),
      );
  }
  current = { controller, handle };
  document.title = `${main.querySelector("h1")?.textContent ?? "Console"} · flow coordinator`;
}

function showSignedIn(signedIn: Session): void {
  session = signedIn;
  const signOut = h("button", { type: "button", class: "small" }, "Sign out");
  signOut.addEventListener("click", () => void signOutNow());
  fill(who, h("span", { class: "actor", "data-testid": "actor" }, `actor ${signedIn.actorId}`), signOut);
  draw(parseRoute(location.hash));
}

/** Forgets the key (IndexedDB) and goes back to the sign-in form. */
async function signOutNow(): Promise<void> {
  leave();
  session = undefined;
  await deleteSession();
  fill(who);
  history.replaceState(null, "", "#/");
  showSignIn();
  notify("Signed out: the key is deleted from this browser");
}

function showSignIn(): void {
  document.title = "Sign in · flow coordinator";
  signInPage(main, (signedIn, note) => {
    if (note) notify(note);
    showSignedIn(signedIn);
  });
}

window.addEventListener("hashchange", () => draw(parseRoute(location.hash)));
setInterval(refreshClocks, 1_000);
(document.getElementById("zone") as HTMLElement).textContent = TIME_ZONE;
document.getElementById("skip")?.addEventListener("click", () => main.focus());

const stored = await loadSession().catch((error: unknown) => {
  notify(`Cannot read the stored key: ${(error as Error).message}`, "error");
  return undefined;
});
if (stored) showSignedIn(stored);
else showSignIn();
