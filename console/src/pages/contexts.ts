import type { Context } from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { ageElement, h, table } from "../dom.js";
import type { PageContext } from "../page.js";
import { href } from "../routes.js";

/**
 * `GET /v1/contexts`: the contexts the signer is in among a window of the deployment's contexts;
 * `next` is where the following window starts.
 */
interface ContextList {
  items: Context[];
  next?: number;
}

/** Contexts looked at per request, and windows read per press of "More" (a deployment may have many). */
const WINDOW = 200;
const WINDOWS_PER_LOAD = 10;

/** The signed-in actor's roles in a context, as the permission lists say. */
export function rolesOf(context: Context, actorId: number): string[] {
  return (["admins", "executors", "readers"] as const)
    .filter((list) => context[list].includes(actorId))
    .map((list) => list.slice(0, -1));
}

/** The contexts page: every context the actor is in, and a way to open one by id. */
export function contextsPage(ctx: PageContext): void {
  const { api, session, main, signal } = ctx;
  const rows = h("div", {}, h("p", { class: "muted" }, "Loading…"));
  const more = h("button", { type: "button", hidden: true }, "More");
  let offset: number | undefined = 0;
  const items: Context[] = [];

  const draw = () => {
    if (items.length === 0) {
      rows.replaceChildren(
        h("p", {}, "You are in no context yet. ", h("code", {}, "flowc context create"), " makes one."),
      );
      return;
    }
    const row = (c: Context) =>
      h(
        "tr",
        {},
        h("td", {}, h("a", { href: href({ page: "flows", contextId: c.id }) }, `Context ${c.id}`)),
        h("td", {}, rolesOf(c, session.actorId).join(", ")),
        h("td", {}, c.paused ? h("span", { class: "badge st-paused" }, "paused") : "running"),
        h("td", {}, ageElement(c.created_at)),
        h(
          "td",
          { class: "links" },
          h("a", { href: href({ page: "runners", contextId: c.id }) }, "runners"),
          " · ",
          h("a", { href: href({ page: "deadletters", contextId: c.id }) }, "dead letters"),
        ),
      );
    rows.replaceChildren(table(["Context", "Your role", "Dispatch", "Created", ""], items.map(row)));
  };

  const load = async () => {
    try {
      // Windows may hold none of the actor's contexts: read on until some turn up, or for a while.
      const before = items.length;
      for (let read = 0; offset !== undefined && read < WINDOWS_PER_LOAD; read++) {
        const page: ContextList = await api.get<ContextList>(`/v1/contexts?offset=${offset}&limit=${WINDOW}`);
        items.push(...page.items);
        offset = page.next;
        if (items.length > before) break;
      }
      if (signal.aborted) return;
      more.hidden = offset === undefined;
      draw();
    } catch (error) {
      rows.replaceChildren(h("p", { class: "form-error" }, `Cannot list contexts: ${describeError(error)}`));
    }
  };
  more.addEventListener("click", () => void load());

  const idInput = h("input", {
    type: "text",
    id: "open-context",
    inputmode: "numeric",
    pattern: "[1-9][0-9]{0,9}",
    required: true,
    size: 8,
  });
  const open = h(
    "form",
    { class: "inline" },
    h("label", { for: "open-context" }, "Open context"),
    idInput,
    h("button", { type: "submit" }, "Open"),
  );
  open.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = href({ page: "flows", contextId: Number(idInput.value) });
  });

  main.replaceChildren(h("h1", {}, "Contexts"), rows, more, h("section", { class: "aside" }, open));
  void load();
}
