import { ScriptKeys } from "./script.js";

/**
 * A commit plan's sections, packed into script calls. Most batches are one call; a batch that
 * writes more than a call should carry (a flow of 10,000 jobs all ready at once: 10,000 messages,
 * some 8 MB) is cut between sections into several calls, each under CALL_BYTES. Each call is
 * atomic and each section guarded (its first write changes something only the first time), so
 * the calls of a plan run in order, and run again after an unknown outcome, write each section
 * once whatever happened before: the plan as a whole is as safe to repeat as one call is.
 */

/**
 * What one call carries, at most, as the length of its keys and arguments: well under the 10 MB
 * a storage request may be (docs/limits.md), with room for JSON's quotes and escapes and for the
 * claims a commit appends. A single section bigger than this still goes, alone in its call; a
 * section's dispatches are cut into parts of DISPATCHES_PER_PART (below), so the largest left
 * is a re-run of 10,000 failed jobs (each job's end forgotten, in one part: about 4.8 MB).
 */
export const CALL_BYTES = 5 * 1024 * 1024;

/**
 * Most dispatches in one part of a section. A transition that makes thousands of jobs ready at
 * once (a flow's start, a fan-out's root ending) writes a message for each, some 8 MB for 10,000:
 * its section is cut into parts, each guarded by its own first message (new only the first
 * time), so a plan can spread them over several calls (below) and each part is still
 * written once.
 */
export const DISPATCHES_PER_PART = 1000;

/** One script call of a plan: its KEYS, its ARGV, and how many sections it holds. */
export interface PlanCall {
  keys: string[];
  args: string[];
  sections: number;
}

/**
 * An operation, and whether it can guard its section: a write that changes something only the
 * first time it runs (an HSET adding a field, an HDEL removing one). The lower the number, the
 * surer: 1 the flow's own lifecycle fields (started_at, compensating_at, ended_at, a re-run's clearing of
 * ended_at), 2 a new message, 3 a job's ended_at. Values are data, but for an "E" (its first
 * value) and an "X" (its first three), which name keys: the call gives their positions.
 */
export type Op = ["H" | "D" | "P" | "Z" | "R" | "L" | "A" | "X" | "E" | "U", string, string[], (1 | 2 | 3)?];

/** A section as it goes into a call: whether its first operation guards it, and its operations. */
export interface SectionPart {
  guarded: boolean;
  ops: Op[];
}

/**
 * Operations whose first values are keys, not data (an "E" the job hash its message takes its
 * end from, an "X" the dead letters' index, the context and its counters): a call names them by
 * their position in its KEYS, as it names every operation's own key.
 */
const KEYED_VALUES: Partial<Record<Op[0], number>> = { E: 1, X: 3 };

/** Packs sections into calls, in order, starting a new call when the next would not fit. */
export class CallPacker {
  private readonly calls: PlanCall[] = [];
  private keys = new ScriptKeys();
  private args: string[] = [];
  private sections = 0;
  private bytes = 0;

  /** `firstRoom`: what the first call may carry (less when it follows a creation in the same call). */
  constructor(private readonly firstRoom: number = CALL_BYTES) {}

  /** Adds a section (nothing for one without operations). */
  add(part: SectionPart): void {
    if (part.ops.length === 0) return;
    const size = sizeOf(part.ops);
    const first = this.calls.length === 0;
    // A call holds at least one section; only a first call that follows a creation may go empty.
    const closable = this.sections > 0 || (first && this.firstRoom < CALL_BYTES);
    if (this.bytes + size > (first ? this.firstRoom : CALL_BYTES) && closable) this.next();
    const at = (key: string) => String(this.keys.at(key));
    const args = this.args;
    args.push(part.guarded ? "1" : "0", String(part.ops.length));
    for (const [op, key, values] of part.ops) {
      args.push(op, at(key), String(values.length));
      const keyed = KEYED_VALUES[op] ?? 0;
      for (let v = 0; v < values.length; v++) args.push(v < keyed ? at(values[v] as string) : (values[v] as string));
    }
    this.sections++;
    this.bytes += size;
  }

  /** The calls, in order: at least one (empty when nothing was added). */
  done(): PlanCall[] {
    if (this.sections > 0 || this.calls.length === 0) this.next();
    return this.calls;
  }

  /** Closes the current call (an empty first call stays, so a creation's section goes alone). */
  private next(): void {
    this.calls.push({ keys: this.keys.list, args: this.args, sections: this.sections });
    this.keys = new ScriptKeys();
    this.args = [];
    this.sections = 0;
    this.bytes = 0;
  }
}

/** A part's operations with its surest guard first, and whether it has one. */
export function guardFirst(ops: Op[]): SectionPart {
  let guard = -1;
  ops.forEach((op, i) => {
    if (op[3] !== undefined && (guard < 0 || op[3] < (ops[guard]?.[3] ?? 4))) guard = i;
  });
  if (guard > 0) ops.unshift(...ops.splice(guard, 1));
  return { guarded: guard >= 0, ops };
}

/** About what a section adds to a call's request: its values, keys and counts, with quotes and commas. */
function sizeOf(ops: Op[]): number {
  let size = 8;
  for (const [, key, values] of ops) {
    size += key.length + 16;
    for (const value of values) size += value.length + 3;
  }
  return size;
}

/** The length of a call's keys and arguments, as CALL_BYTES counts it. */
export function callBytes(call: { keys: string[]; args: string[] }): number {
  let size = 0;
  for (const key of call.keys) size += key.length + 3;
  for (const arg of call.args) size += arg.length + 3;
  return size;
}
