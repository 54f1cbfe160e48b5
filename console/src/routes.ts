import { TEMPLATE_NAME } from "../../shared/model/template-name.js";

/**
 * The console's pages, addressed by the URL's fragment (`/console/#/contexts/1/flows/2`), so the
 * Worker serves one page and every view can be bookmarked, shared and reloaded.
 */
export type Route =
  | { page: "contexts" }
  | { page: "flows"; contextId: number; status?: string }
  | { page: "flow"; contextId: number; flowId: number; jobId?: number }
  | { page: "runners"; contextId: number }
  | { page: "deadletters"; contextId: number }
  | { page: "templates"; contextId: number }
  | { page: "template"; contextId: number; name: string }
  | { page: "schedules"; contextId: number }
  | { page: "schedule"; contextId: number; scheduleId: number }
  | { page: "missing"; hash: string };

const FLOW_STATUSES = new Set([
  "dispatched",
  "started",
  "finished",
  "error",
  "compensating",
  "compensated",
  "compensation_failed",
]);

/** The route a fragment names. */
export function parseRoute(hash: string): Route {
  const [path = "", query = ""] = hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean);
  const id = (text: string | undefined) => (text && /^[1-9]\d{0,9}$/.test(text) ? Number(text) : undefined);
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "contexts")) return { page: "contexts" };
  const contextId = parts[0] === "contexts" ? id(parts[1]) : undefined;
  if (contextId === undefined) return { page: "missing", hash };
  const [section, second, third, fourth] = parts.slice(2);
  if (section === undefined || (section === "flows" && second === undefined)) {
    const status = new URLSearchParams(query).get("status") ?? undefined;
    return status && FLOW_STATUSES.has(status) ? { page: "flows", contextId, status } : { page: "flows", contextId };
  }
  if (section === "flows") {
    const flowId = id(second);
    if (flowId === undefined) return { page: "missing", hash };
    if (third === undefined) return { page: "flow", contextId, flowId };
    const jobId = third === "jobs" ? id(fourth) : undefined;
    return jobId === undefined ? { page: "missing", hash } : { page: "flow", contextId, flowId, jobId };
  }
  if (section === "runners" && second === undefined) return { page: "runners", contextId };
  if (section === "deadletters" && second === undefined) return { page: "deadletters", contextId };
  if (section === "templates" && second === undefined) return { page: "templates", contextId };
  if (section === "schedules" && second === undefined) return { page: "schedules", contextId };
  const scheduleId = section === "schedules" && third === undefined ? id(second) : undefined;
  if (scheduleId !== undefined) return { page: "schedule", contextId, scheduleId };
  const name = decoded(second ?? "");
  if (section === "templates" && third === undefined && TEMPLATE_NAME.test(name))
    return { page: "template", contextId, name };
  return { page: "missing", hash };
}

/** A path segment decoded, or "" for one that does not decode (a stray %). */
function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return "";
  }
}

/** The fragment of a route (what links point at). */
export function href(route: Exclude<Route, { page: "missing" }>): string {
  switch (route.page) {
    case "contexts":
      return "#/contexts";
    case "flows":
      return `#/contexts/${route.contextId}/flows${route.status ? `?status=${route.status}` : ""}`;
    case "flow":
      return `#/contexts/${route.contextId}/flows/${route.flowId}${route.jobId ? `/jobs/${route.jobId}` : ""}`;
    case "runners":
      return `#/contexts/${route.contextId}/runners`;
    case "deadletters":
      return `#/contexts/${route.contextId}/deadletters`;
    case "templates":
      return `#/contexts/${route.contextId}/templates`;
    case "template":
      return `#/contexts/${route.contextId}/templates/${encodeURIComponent(route.name)}`;
    case "schedules":
      return `#/contexts/${route.contextId}/schedules`;
    case "schedule":
      return `#/contexts/${route.contextId}/schedules/${route.scheduleId}`;
  }
}
