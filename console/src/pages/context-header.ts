import type { Context } from "../../../shared/model/index.js";
import { describeError } from "../api.js";
import { h, notify } from "../dom.js";
import type { PageContext } from "../page.js";
import { href } from "../routes.js";
import { rolesOf } from "./contexts.js";

type Section = "flows" | "templates" | "schedules" | "runners" | "deadletters";

const SECTIONS: { section: Section; label: string }[] = [
  { section: "flows", label: "Flows" },
  { section: "templates", label: "Templates" },
  { section: "schedules", label: "Schedules" },
  { section: "runners", label: "Runners" },
  { section: "deadletters", label: "Dead letters" },
];

/**
 * The top of every page of a context: its name, the actor's role, whether dispatch is paused
 * with the button that pauses or resumes it, and the tabs to its flows, templates, schedules,
 * runners and dead letters.
 */
export function contextHeader(ctx: PageContext, contextId: number, active: Section): HTMLElement {
  const { api, session } = ctx;
  const state = h("span", { class: "badge", "data-testid": "dispatch-state" }, "…");
  const role = h("span", { class: "muted" });
  const toggle = h("button", { type: "button", disabled: true }, "Pause dispatch");
  let paused = false;

  const show = (context: Pick<Context, "paused">) => {
    paused = context.paused === true;
    state.className = `badge ${paused ? "st-paused" : "st-running"}`;
    state.textContent = paused ? "dispatch paused" : "dispatching";
    toggle.textContent = paused ? "Resume dispatch" : "Pause dispatch";
    toggle.disabled = false;
  };

  toggle.addEventListener("click", () => {
    toggle.disabled = true;
    const action = paused ? "resume" : "pause";
    api
      .post<{ paused: boolean }>(`/v1/contexts/${contextId}/${action}`)
      .then((answer) => {
        show(answer);
        notify(answer.paused ? `Context ${contextId}: dispatch paused` : `Context ${contextId}: dispatch resumed`);
      })
      .catch((error: unknown) => {
        toggle.disabled = false;
        notify(`Cannot ${action} context ${contextId}: ${describeError(error)}`, "error");
      });
  });

  api
    .get<Context>(`/v1/contexts/${contextId}`)
    .then((context) => {
      show(context);
      const roles = rolesOf(context, session.actorId);
      role.textContent = `you: ${roles.join(", ") || "no role"}`;
      // Only admins may pause: others see the state, not a button that would be refused.
      toggle.hidden = !roles.includes("admin");
    })
    .catch((error: unknown) => {
      state.textContent = "unknown";
      notify(`Cannot load context ${contextId}: ${describeError(error)}`, "error");
    });

  const tabs = h(
    "nav",
    { class: "tabs", "aria-label": `Context ${contextId}` },
    ...SECTIONS.map(({ section, label }) =>
      h(
        "a",
        {
          href: href({ page: section, contextId }),
          ...(section === active ? { "aria-current": "page", class: "active" } : {}),
        },
        label,
      ),
    ),
  );
  return h(
    "div",
    { class: "context-head" },
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, h("a", { href: href({ page: "contexts" }), class: "crumb" }, "Contexts"), ` / Context ${contextId}`),
      state,
      role,
      toggle,
    ),
    tabs,
  );
}
