import { TEMPLATE_NAME } from "../../shared/model/template-name.js";

/**
 * The console's pages, addressed by the URL's fragment (`/console/#/contexts/1/flows/2`), so the
 * Worker serves one page and every view can be bookmarked, shared and reloaded.
 */
export type Route =
  | { page: "contexts" }
  | ({ page: "flows"; contextId: number } & FlowFilters)
  | { page: "flow"; contextId: number; flowId: number; jobId?: number }
  | { page: "runners"; contextId: number }
  | { page: "deadletters"; contextId: number }
  | { page: "templates"; contextId: number }
  | { page: "template"; contextId: number; name: string }
  | { page: "schedules"; contextId: number }
  | { page: "schedule"; contextId: number; scheduleId: number }
  | { page: "missing"; hash: string };

/** What a context's list of flows is narrowed to: a status (the API's name), a part of the name, labels (`key:value`). */
export interface FlowFilters {
  status?: string;
  name?: string;
  labels?: string[];
}

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
  if (section === undefined || (section === "flows" && second === undefined)) return flowsRoute(contextId, query);
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

/** A context's list of flows, with the filters its query gives (an unknown status is left out). */
function flowsRoute(contextId: number, query: string): Route {
  const params = new URLSearchParams(query);
  const status = params.get("status") ?? "";
  const name = params.get("name") ?? "";
  const labels = params.getAll("label").filter(Boolean);
  return {
    page: "flows",
    contextId,
    ...(FLOW_STATUSES.has(status) ? { status } : {}),
    ...(name ? { name } : {}),
    ...(labels.length > 0 ? { labels } : {}),
  };
}

/** A list's filters as a query (`?status=error&name=x&label=env:prod`), or "" when there are none. */
function filtersQuery(filters: FlowFilters): string {
  const params = new URLSearchParams();
  if (filters.status) params.set("status", filters.status);
  if (filters.name) params.set("name", filters.name);
  for (const label of filters.labels ?? []) params.append("label", label);
  const text = params.toString();
  return text ? `?${text}` : "";
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
      return `#/contexts/${route.contextId}/flows${filtersQuery(route)}`;
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
