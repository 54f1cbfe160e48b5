/**
 * A flow's identity as people read it, zod-free (the console's bundle imports it): its limits,
 * what started it (its trigger) and its labels in words, and the list filters' checks. The
 * schemas are in flow.ts; docs/flows.md, "Names, labels and triggers".
 */

/**
 * The limits of a flow's `name` and `labels`. A name is a short title (Temporal's workflow type,
 * a Kubernetes object's name); labels are Kubernetes-like: a few keys of up to 63 characters,
 * values of up to 128, so a list filter (`label=key:value`) stays a short query.
 */
export const FLOW_IDENTITY_LIMITS = {
  nameChars: 128,
  labels: 16,
  labelKeyChars: 63,
  labelValueChars: 128,
  /** Label filters one list request may give (`label=` repeated: all must match). */
  labelFilters: 8,
} as const;

/** A label's key: letters and digits, with `_ . / -` inside, starting and ending with a letter or digit. */
export const LABEL_KEY = /^[A-Za-z0-9](?:[A-Za-z0-9_./-]{0,61}[A-Za-z0-9])?$/;

/** No control characters (a name or label value is one line of text). */
export const NO_CONTROL = /^[^\p{Cc}]*$/u;

/**
 * A flow's identity as its record, its view and its state keep it: its name and labels (from its
 * submission, or defaulted by its start), and the schedule that started it. Empty fields are
 * left out, so a flow without any costs its record nothing.
 */
export interface FlowIdentity {
  name?: string;
  labels?: Record<string, string>;
  schedule_id?: number;
}

/** `identity` without its empty parts (no labels is no `labels`), or undefined when nothing is left. */
export function identityOf(identity: {
  name?: string | undefined;
  labels?: Record<string, string> | undefined;
  schedule_id?: number | undefined;
}): FlowIdentity | undefined {
  const kept: FlowIdentity = {
    ...(identity.name !== undefined ? { name: identity.name } : {}),
    ...(identity.labels && Object.keys(identity.labels).length > 0 ? { labels: identity.labels } : {}),
    ...(identity.schedule_id !== undefined ? { schedule_id: identity.schedule_id } : {}),
  };
  return Object.keys(kept).length > 0 ? kept : undefined;
}

/** What started a flow: a person or program (manual), a schedule, a parent flow's job, a template start. */
export type FlowTrigger =
  | { kind: "manual" }
  | { kind: "schedule"; schedule_id: number }
  | { kind: "parent"; flow_id: number; job_id: number }
  | { kind: "template"; name: string; version: number };

/** What a flow's record or view says of where it came from. */
export interface TriggerFacts {
  schedule_id?: number | undefined;
  parent?: { flow_id: number; job_id: number } | undefined;
  template?: { name: string; version: number } | undefined;
}

/**
 * What started a flow, from its record or view: a parent flow's job (a child flow, even one
 * made from a template), else a schedule (whether its flow is inline or a stored template),
 * else a template start, else manual (a submission).
 */
export function flowTrigger(flow: TriggerFacts): FlowTrigger {
  if (flow.parent) return { kind: "parent", flow_id: flow.parent.flow_id, job_id: flow.parent.job_id };
  if (flow.schedule_id !== undefined) return { kind: "schedule", schedule_id: flow.schedule_id };
  if (flow.template) return { kind: "template", name: flow.template.name, version: flow.template.version };
  return { kind: "manual" };
}

/** A trigger in words: `manual`, `schedule 3`, `parent flow 12`, `template nightly v4`. */
export function triggerText(trigger: FlowTrigger): string {
  switch (trigger.kind) {
    case "manual":
      return "manual";
    case "schedule":
      return `schedule ${trigger.schedule_id}`;
    case "parent":
      return `parent flow ${trigger.flow_id}`;
    case "template":
      return `template ${trigger.name} v${trigger.version}`;
  }
}

/** Labels in words, sorted by key: `env=prod team=data` (empty: none). */
export function labelsText(labels: Record<string, string> | undefined): string {
  return Object.entries(labels ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([key, value]) => `${key}=${value}`)
    .join(" ");
}

/** One label filter of a list: `key:value` (that value), or `key` alone (any value). */
export interface LabelFilter {
  key: string;
  value?: string;
}

/** Reads `key:value` or `key` (the first `:` splits: a value may hold more); undefined when it is not one. */
export function parseLabelFilter(text: string): LabelFilter | undefined {
  const colon = text.indexOf(":");
  const key = colon < 0 ? text : text.slice(0, colon);
  if (!LABEL_KEY.test(key)) return undefined;
  if (colon < 0) return { key };
  const value = text.slice(colon + 1);
  if (value.length > FLOW_IDENTITY_LIMITS.labelValueChars || !NO_CONTROL.test(value)) return undefined;
  return { key, value };
}

/** What a list's filters read of a flow. */
export interface FilterFacts {
  name?: string | undefined;
  labels?: Record<string, string> | undefined;
}

/**
 * Whether a flow passes a list's filters: its name holds `name` (case-insensitive: a search box's
 * habit), and it has every label asked for (with that value, when one is given).
 */
export function matchesFilters(flow: FilterFacts, filters: { name?: string; labels?: LabelFilter[] }): boolean {
  if (filters.name !== undefined && !(flow.name ?? "").toLowerCase().includes(filters.name.toLowerCase())) return false;
  return (filters.labels ?? []).every(({ key, value }) => {
    if (!flow.labels || !Object.hasOwn(flow.labels, key)) return false;
    return value === undefined || flow.labels[key] === value;
  });
}
