/**
 * A small Prometheus registry for the fleet's `/metrics`: counters, gauges read at scrape time
 * and one histogram, written in the text exposition format (version 0.0.4).
 */

type Labels = Record<string, string>;

interface Family {
  help: string;
  type: "counter" | "gauge" | "histogram";
  samples(): Promise<[suffix: string, labels: Labels, value: number][]>;
}

/** Upper bounds of the job duration histogram, in seconds. */
const DURATION_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800];

/** The metrics of one gateway, worker or combined process. */
export class FleetMetrics {
  private readonly families = new Map<string, Family>();
  private readonly counts = new Map<string, Map<string, { labels: Labels; value: number }>>();
  private readonly durations = new Map<string, { labels: Labels; buckets: number[]; sum: number; count: number }>();

  /** Adds `by` to counter `name` with `labels` (declared on first use with `help`). */
  count(name: string, help: string, labels: Labels = {}, by = 1): void {
    if (!this.families.has(name)) {
      const series = new Map<string, { labels: Labels; value: number }>();
      this.counts.set(name, series);
      this.families.set(name, {
        help,
        type: "counter",
        samples: async () => [...series.values()].map((s) => ["", s.labels, s.value]),
      });
    }
    const series = this.counts.get(name)!;
    const key = JSON.stringify(labels);
    const entry = series.get(key) ?? { labels, value: 0 };
    entry.value += by;
    series.set(key, entry);
  }

  /** A gauge read when scraped; `read` gives its labelled values (a failed read leaves it out). */
  gauge(name: string, help: string, read: () => Promise<[Labels, number][]> | [Labels, number][]): void {
    this.families.set(name, {
      help,
      type: "gauge",
      samples: async () => {
        try {
          return (await read()).map(([labels, value]) => ["", labels, value]);
        } catch {
          return [];
        }
      },
    });
  }

  /** Records a job's run time (seconds) in `fleet_job_duration_seconds`. */
  observeDuration(seconds: number, labels: Labels): void {
    const name = "fleet_job_duration_seconds";
    if (!this.families.has(name)) {
      this.families.set(name, {
        help: "How long jobs ran on this worker, from start to result.",
        type: "histogram",
        samples: async () =>
          [...this.durations.values()].flatMap((h) => [
            ...DURATION_BUCKETS.map((le, i): [string, Labels, number] => [
              "_bucket",
              { ...h.labels, le: String(le) },
              h.buckets[i] ?? 0,
            ]),
            ["_bucket", { ...h.labels, le: "+Inf" }, h.count] as [string, Labels, number],
            ["_sum", h.labels, h.sum] as [string, Labels, number],
            ["_count", h.labels, h.count] as [string, Labels, number],
          ]),
      });
    }
    const key = JSON.stringify(labels);
    const h = this.durations.get(key) ?? { labels, buckets: DURATION_BUCKETS.map(() => 0), sum: 0, count: 0 };
    DURATION_BUCKETS.forEach((le, i) => {
      if (seconds <= le) h.buckets[i] = (h.buckets[i] ?? 0) + 1;
    });
    h.sum += seconds;
    h.count++;
    this.durations.set(key, h);
  }

  /** The exposition text. */
  async render(): Promise<string> {
    const lines: string[] = [];
    for (const [name, family] of this.families) {
      lines.push(`# HELP ${name} ${family.help}`, `# TYPE ${name} ${family.type}`);
      for (const [suffix, labels, value] of await family.samples()) {
        const text = Object.entries(labels)
          .map(([k, v]) => `${k}="${v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n")}"`)
          .join(",");
        lines.push(`${name}${suffix}${text ? `{${text}}` : ""} ${value}`);
      }
    }
    return `${lines.join("\n")}\n`;
  }
}
