import { DeliveryPayload } from "../shared/model/index.js";
import type { RunnerLog } from "./job.js";
import type { Reporter } from "./reporter.js";

/**
 * Reads a delivery with the DeliveryPayload schema. Callback URLs without an origin (what the
 * coordinator sends when it does not know its public URL, e.g. from its background sweep) fail
 * that schema; they are resolved against `--url` first, with a warning, since the paths are
 * good and the runner knows where the coordinator is.
 */
export function parseDelivery(reporter: Reporter, log: RunnerLog): (raw: unknown) => DeliveryPayload | string {
  let warned = false;
  return (raw) => {
    const callbacks = (raw as { callbacks?: unknown } | null)?.callbacks;
    if (callbacks && typeof callbacks === "object") {
      const fixed = Object.entries(callbacks).map(([name, url]) => [
        name,
        typeof url === "string" && url.startsWith("/") ? reporter.resolve(url) : url,
      ]);
      if (fixed.some(([name, url]) => url !== (callbacks as Record<string, unknown>)[name as string])) {
        if (!warned) log.warn("the coordinator sent callback paths without an origin; resolving them against --url");
        warned = true;
        raw = { ...(raw as object), callbacks: Object.fromEntries(fixed) };
      }
    }
    const parsed = DeliveryPayload.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      return `not a delivery: ${issue?.path.join(".") || "body"}: ${issue?.message}`;
    }
    if (parsed.data.message.job.length === 0) return "not a delivery: the message carries no job";
    return parsed.data;
  };
}
