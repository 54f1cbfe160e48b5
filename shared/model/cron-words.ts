/**
 * A schedule's "when" read out in words: `0 9 * * MON-FRI` in Europe/Berlin is "at 09:00
 * Europe/Berlin, Monday to Friday", `*\/15 * * * *` is "every 15 minutes", an interval of 1800 s
 * is "every 30 minutes". It reads the cron forms the coordinator accepts (croner's
 * `5-or-6-parts`: minute hour day month weekday, or seconds first; lists, ranges, steps, month
 * and day names, the @daily kind of nicknames); for what it does not read (croner's L, W, #, ?)
 * it answers undefined and the expression stands alone.
 *
 * Zod-free on purpose: the console's bundle imports it.
 */

/** One cron field: any value, every nth value (`*\/n`), or a list of values and ranges (each with a step). */
type Field =
  | { kind: "any" }
  | { kind: "step"; every: number }
  | { kind: "list"; parts: { from: number; to: number; step: number }[] };

const DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];
const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];

const NICKNAMES: Record<string, string> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

/** A value of a field: a number, or a day's or month's three-letter name. */
function value(text: string, names: string[] | undefined): number | undefined {
  if (/^\d{1,2}$/.test(text)) return Number(text);
  const index = names?.findIndex((n) => n.slice(0, 3).toUpperCase() === text.toUpperCase()) ?? -1;
  if (index < 0) return undefined;
  return names === MONTHS ? index + 1 : index;
}

/** Parses one field whose largest value is `max`; undefined for what this reader does not read. */
function field(text: string, max: number, names?: string[]): Field | undefined {
  if (text === "*") return { kind: "any" };
  const step = /^\*\/(\d{1,2})$/.exec(text);
  if (step) return Number(step[1]) === 1 ? { kind: "any" } : { kind: "step", every: Number(step[1]) };
  const parts: { from: number; to: number; step: number }[] = [];
  for (const item of text.split(",")) {
    const m = /^([A-Za-z0-9]+)(?:-([A-Za-z0-9]+))?(?:\/(\d{1,2}))?$/.exec(item);
    if (!m) return undefined;
    const from = value(m[1] as string, names);
    // `5/15` runs from 5 to the field's end, as `5-59/15`.
    const to = m[2] !== undefined ? value(m[2], names) : m[3] !== undefined ? max : from;
    if (from === undefined || to === undefined) return undefined;
    parts.push({ from, to, step: m[3] === undefined ? 1 : Number(m[3]) });
  }
  return { kind: "list", parts };
}

/** The single value a field names, if it names exactly one. */
function single(f: Field): number | undefined {
  if (f.kind !== "list" || f.parts.length !== 1) return undefined;
  const [p] = f.parts;
  return p && p.from === p.to ? p.from : undefined;
}

/** "a", "a and b", "a, b and c". */
function and(items: string[]): string {
  return items.length <= 1 ? (items[0] ?? "") : `${items.slice(0, -1).join(", ")} and ${items[items.length - 1]}`;
}

const two = (n: number) => String(n).padStart(2, "0");

/** A field's values in words ("0, 15 and 30", "Monday to Friday", "every 2nd from 1 to 11"), each named by `name`. */
function values(f: Field & { kind: "list" }, name: (n: number) => string): string {
  return and(
    f.parts.map((p) => {
      if (p.from === p.to) return name(p.from);
      const range = `${name(p.from)} to ${name(p.to)}`;
      return p.step === 1 ? range : `every ${p.step} from ${range}`;
    }),
  );
}

/** Hours as clock times at minute `m` (and second `s`): "09:00 and 17:00", "every hour from 09:30 to 17:30". */
function hoursAt(hour: Field & { kind: "list" }, m: number, s: number, zone: string): string {
  const clock = (h: number) => `${two(h)}:${two(m)}${s ? `:${two(s)}` : ""}`;
  if (hour.parts.every((p) => p.from === p.to)) return `at ${and(hour.parts.map((p) => clock(p.from)))} ${zone}`;
  const spans = hour.parts.map((p) => {
    if (p.from === p.to) return `at ${clock(p.from)}`;
    const every = p.step === 1 ? "every hour" : `every ${p.step} hours`;
    return `${every} from ${clock(p.from)} to ${clock(p.to)}`;
  });
  return `${and(spans)} ${zone}`;
}

/** Within which hours something runs every minute or so: "", " from 09:00 to 17:59 UTC", " of every 2nd hour". */
function hourScope(hour: Field, zone: string): string {
  if (hour.kind === "any") return "";
  if (hour.kind === "step") return ` of every ${hour.every}th hour`;
  const spans = hour.parts.map((p) =>
    p.from === p.to || p.step !== 1 ? `${two(p.from)}:00 to ${two(p.from)}:59` : `${two(p.from)}:00 to ${two(p.to)}:59`,
  );
  return hour.parts.every((p) => p.step === 1)
    ? ` from ${and(spans)} ${zone}`
    : ` in hours ${values(hour, String)} ${zone}`;
}

/** The time of day part: "at 09:00 UTC", "every 15 minutes", "every hour at minute 5", …; undefined when not read. */
function timeWords(sec: Field, min: Field, hour: Field, zone: string): string | undefined {
  const s = single(sec);
  if (s === undefined) {
    // Sub-minute schedules: said when the rest is "every minute" of every hour.
    if (min.kind !== "any" || hour.kind !== "any") return undefined;
    if (sec.kind === "any") return "every second";
    if (sec.kind === "step") return `every ${sec.every} seconds`;
    return `every minute at seconds ${values(sec, String)}`;
  }
  const m = single(min);
  const seconds = s ? ` and ${s} seconds` : "";
  if (m !== undefined) {
    if (hour.kind === "list") return hoursAt(hour, m, s, zone);
    const at = m === 0 && !s ? "on the hour" : `at minute ${m}${seconds}`;
    return hour.kind === "any" ? `every hour${m === 0 && !s ? ", " : " "}${at}` : `every ${hour.every} hours, ${at}`;
  }
  if (s) return undefined;
  if (min.kind === "any") return `every minute${hourScope(hour, zone)}`;
  if (min.kind === "step") return `every ${min.every} minutes${hourScope(hour, zone)}`;
  const scope = hourScope(hour, zone);
  return `at minutes ${values(min, String)} ${scope ? scope.trim() : "of every hour"}`;
}

/** The days part: "" (every day), "Monday to Friday", "on day 1 of the month", …; Vixie cron's OR when both are given. */
function dayWords(dom: Field, month: Field, dow: Field): string {
  const parts: string[] = [];
  const days = dow.kind === "list" ? values(dow, (d) => DAYS[d % 7] as string) : undefined;
  const dates =
    dom.kind === "list"
      ? `on ${single(dom) !== undefined ? "day" : "days"} ${values(dom, String)} of the month`
      : dom.kind === "step"
        ? `every ${dom.every} days`
        : undefined;
  if (days && dates) parts.push(`${dates} or on ${days}`);
  else if (days) parts.push(single(dow) !== undefined ? `on ${days}` : days);
  else if (dow.kind === "step") parts.push(`every ${dow.every} days of the week`);
  else if (dates) parts.push(dates);
  if (month.kind === "list") parts.push(`in ${values(month, (n) => MONTHS[n - 1] as string)}`);
  if (month.kind === "step") parts.push(`every ${month.every} months`);
  return parts.join(", ");
}

/**
 * A cron expression in words, its clock times in `timezone` (default UTC); undefined when the
 * expression uses what this reader does not read.
 */
export function cronWords(expression: string, timezone: string | undefined = "UTC"): string | undefined {
  const text = NICKNAMES[expression.trim().toLowerCase()] ?? expression.trim();
  const fields = text.split(/\s+/);
  if (fields.length !== 5 && fields.length !== 6) return undefined;
  const [secText, minText, hourText, domText, monthText, dowText] = fields.length === 6 ? fields : ["0", ...fields];
  const sec = field(secText as string, 59);
  const min = field(minText as string, 59);
  const hour = field(hourText as string, 23);
  const dom = field(domText as string, 31);
  const month = field(monthText as string, 12, MONTHS);
  const dow = field(dowText as string, 7, DAYS);
  if (!sec || !min || !hour || !dom || !month || !dow) return undefined;
  const time = timeWords(sec, min, hour, timezone);
  if (time === undefined) return undefined;
  const days = dayWords(dom, month, dow);
  if (!days) return /^at \d/.test(time) ? `every day ${time}` : time;
  return `${time}, ${days}`;
}

/** An interval schedule in words: "every 30 seconds", "every 15 minutes", "every 2 hours", "every 90 seconds". */
export function intervalWords(seconds: number): string {
  const units: [number, string][] = [
    [86_400, "day"],
    [3_600, "hour"],
    [60, "minute"],
  ];
  for (const [size, unit] of units) {
    if (seconds % size === 0) {
      const n = seconds / size;
      return n === 1 ? `every ${unit}` : `every ${n} ${unit}s`;
    }
  }
  return seconds === 1 ? "every second" : `every ${seconds} seconds`;
}

/** When a schedule fires, in words: its cron (in its zone) or its interval; the bare expression when it cannot be read. */
export function scheduleWords(spec: {
  cron?: string | undefined;
  timezone?: string | undefined;
  interval_seconds?: number | undefined;
}): string {
  if (spec.interval_seconds !== undefined) return intervalWords(spec.interval_seconds);
  if (spec.cron === undefined) return "never";
  return cronWords(spec.cron, spec.timezone) ?? `cron ${spec.cron}`;
}
