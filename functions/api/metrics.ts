import type { MiddlewareHandler } from "hono";
import type { AppEnv } from "./app-env.js";

/**
 * Counters of this isolate, in Prometheus text. Workers run many isolates: each /metrics answer
 * is one isolate's share since it started (scrapers sum them, or read the gauges, which come
 * from storage and are the same everywhere).
 */
const counters = new Map<string, number>();
/**
 * When this isolate served its first request. Not taken at module load: workerd's clock reads 0
 * (1970) outside a request, which made the uptime the seconds since 1970.
 */
let started: number | undefined;

function key(name: string, labels: Record<string, string>): string {
  const body = Object.entries(labels)
    .map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, "_")}"`)
    .join(",");
  return body ? `${name}{${body}}` : name;
}

/** Adds to a counter. */
function count(name: string, labels: Record<string, string> = {}, by = 1): void {
  const k = key(name, labels);
  counters.set(k, (counters.get(k) ?? 0) + by);
}

/** Counts every answered request by route and status. */
export const countRequests: MiddlewareHandler<AppEnv> = async (c, next) => {
  started ??= Date.now();
  await next();
  count("coordinator_http_requests_total", {
    method: c.req.method,
    route: c.req.routePath,
    status: String(c.res.status),
  });
};

/** The counters and the given gauges as Prometheus text (version 0.0.4). */
export function renderMetrics(gauges: Record<string, { help: string; value: number }>): string {
  const lines: string[] = [
    "# HELP coordinator_http_requests_total Requests answered by this isolate, by route and status.",
    "# TYPE coordinator_http_requests_total counter",
  ];
  for (const [k, v] of counters) if (k.startsWith("coordinator_http_requests_total")) lines.push(`${k} ${v}`);
  lines.push(
    "# HELP coordinator_isolate_uptime_seconds Seconds since this isolate served its first request.",
    "# TYPE coordinator_isolate_uptime_seconds gauge",
  );
  lines.push(`coordinator_isolate_uptime_seconds ${Math.floor((Date.now() - (started ?? Date.now())) / 1000)}`);
  for (const [name, g] of Object.entries(gauges))
    lines.push(`# HELP ${name} ${g.help}`, `# TYPE ${name} gauge`, `${name} ${g.value}`);
  return `${lines.join("\n")}\n`;
}
