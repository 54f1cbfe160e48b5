import { z } from "zod";
import { ScriptType } from "../model/enums.js";
import type { Runner } from "../model/runner.js";

/**
 * The push runners a context's dispatcher names in the context hash (`push_runners`), so that the
 * commits of a flow whose object has not delivered to any of them yet may claim work for them
 * (docs/dispatch.md, "Claims in the commit"). A name is a candidate only: the claim checks the
 * runner's record, and a runner named wrongly is skipped.
 */
export interface PushRunnerName {
  id: number;
  scriptTypes: ScriptType[];
}

/** The most push runners the dispatcher names (the claims of one queue try at most four). */
export const PUSH_RUNNERS_NAMED = 16;

/** As the field holds them: `[[id, [script type, …]], …]`. */
const Named = z.array(z.tuple([z.int().positive(), z.array(ScriptType)]));

/** The runners a `push_runners` field names; none when it is missing or does not parse. */
export function parsePushRunners(raw: unknown): PushRunnerName[] {
  if (typeof raw !== "string" || raw === "") return [];
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch {
    return [];
  }
  const named = Named.safeParse(value);
  return named.success ? named.data.slice(0, PUSH_RUNNERS_NAMED).map(([id, scriptTypes]) => ({ id, scriptTypes })) : [];
}

/** The push runners (those with an address) of a context's runner list, as the dispatcher names them. */
export function pushRunnersOf(runners: readonly Pick<Runner, "id" | "address" | "script_types">[]): PushRunnerName[] {
  return runners.filter((r) => r.address !== "").map((r) => ({ id: r.id, scriptTypes: r.script_types }));
}

/** The field's value for these runners. */
export function formatPushRunners(runners: readonly PushRunnerName[]): string {
  return JSON.stringify(runners.slice(0, PUSH_RUNNERS_NAMED).map((r) => [r.id, r.scriptTypes]));
}
