import { readFileSync } from "node:fs";
import { Cron } from "croner";

/**
 * The cron triggers of a wrangler.toml (`[triggers] crons = [...]`). Read with a pattern, not a
 * TOML parser: the launcher only needs this one line, and a file it cannot read fails loudly.
 */
export function cronsOf(wranglerToml: string): string[] {
  const text = readFileSync(wranglerToml, "utf8");
  const section = /^\[triggers\][^[]*?^crons\s*=\s*\[([^\]]*)\]/ms.exec(text);
  if (!section) return [];
  return [...(section[1] as string).matchAll(/"([^"]+)"/g)].map((m) => m[1] as string);
}

/** A running cron firer: `stop` cancels what is scheduled. */
export interface CronFirer {
  stop(): void;
}

/**
 * Fires a local Worker's scheduled handler on the schedule of its cron triggers, as Cloudflare
 * does in production: `wrangler dev` never fires crons by itself, it only exposes
 * `/__scheduled` (with `--test-scheduled`). Each fire is a GET of `/__scheduled?cron=<expr>`;
 * a failed fire is reported through `log` and the next one comes on time.
 */
export function fireCrons(workerUrl: string, crons: string[], log: (line: string) => void = () => {}): CronFirer {
  const jobs = crons.map(
    (expression) =>
      new Cron(expression, { timezone: "UTC", protect: true }, async () => {
        try {
          const res = await fetch(`${workerUrl}/__scheduled?cron=${encodeURIComponent(expression)}`, {
            signal: AbortSignal.timeout(60_000),
          });
          await res.arrayBuffer();
          if (!res.ok) log(`cron ${expression}: the scheduled handler answered ${res.status}`);
        } catch (error) {
          log(`cron ${expression}: ${(error as Error).message}`);
        }
      }),
  );
  return { stop: () => jobs.forEach((job) => job.stop()) };
}
