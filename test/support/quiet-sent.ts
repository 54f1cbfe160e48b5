import type { PrivateStack } from "./private-stack.js";

/**
 * The commands a stack's REST endpoint has sent, read once nothing more went out for `idleMs`:
 * a count of what some work cost, taken after its effects after the answer (relays, alarms) ran.
 */
export async function quietSent(stack: Pick<PrivateStack, "restSent">, idleMs: number): Promise<number> {
  let last = stack.restSent().commands;
  for (;;) {
    await new Promise((r) => setTimeout(r, idleMs));
    const now = stack.restSent().commands;
    if (now === last) return now;
    last = now;
  }
}
