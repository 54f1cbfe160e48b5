import { afterAll, beforeAll } from "vitest";
import type { FlowSubmissionInput } from "../../shared/flow/index.js";
import type { FlowView } from "../../shared/model/index.js";
import { startPrivateStack, type PrivateStack, type PrivateStackOptions } from "./private-stack.js";

// Apart from private-stack.ts so that the chaos soak, a plain script, never loads vitest's hooks.

/** An actor registered on a private stack, with a client signing as it. */
export type StackActor = Awaited<ReturnType<PrivateStack["newActor"]>>;

/**
 * What `usePrivateStack` gives a test file. The stack and its actor exist once the file's
 * beforeAll ran, so they are read through accessors, inside tests and later hooks.
 */
export interface PrivateStackFixture {
  /** The file's own stack. */
  stack(): PrivateStack;
  /** The actor the file's tests act as: the contexts they create are its, so it is their admin. */
  admin(): StackActor;
  /** Submits a flow as the admin, started at once. */
  submit(contextId: number, body: FlowSubmissionInput): Promise<FlowView>;
  /** How many slots the runner holds in Redis: the attempts it counts as running. */
  slotsHeld(contextId: number, runnerId: number): Promise<number>;
}

/**
 * Starts a private stack (see startPrivateStack) and registers an actor on it before the calling
 * file's tests, and stops it after them. Call it at the top level of a test file.
 */
export function usePrivateStack(label: string, options: PrivateStackOptions = {}): PrivateStackFixture {
  let started: PrivateStack | undefined;
  let actor: StackActor | undefined;
  beforeAll(async () => {
    started = await startPrivateStack(label, options);
    actor = await started.newActor();
  });
  // A stack whose actor could not be registered is stopped all the same.
  afterAll(() => started?.stop());

  const up = <T>(value: T | undefined): T => {
    if (value === undefined) throw new Error(`the private stack "${label}" is not up: read it inside a test or hook`);
    return value;
  };
  const stack = () => up(started);
  const admin = () => up(actor);
  return {
    stack,
    admin,
    submit: (contextId, body) => admin().client.submitFlow(contextId, { start: true, ...body }),
    slotsHeld: (contextId, runnerId) =>
      stack().redis.exec<number>(["ZCARD", stack().keys.runnerSlots(contextId, runnerId)]),
  };
}
