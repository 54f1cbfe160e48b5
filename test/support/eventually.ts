// Polling, for Node and workerd alike: no Node imports here (the worker project includes this file).

/**
 * Calls `check` until it returns something other than undefined, and resolves with that; fails
 * once `timeoutMs` passed without it, naming `what` it waited for.
 */
export async function eventually<T>(
  check: () => Promise<T | undefined> | T | undefined,
  timeoutMs: number,
  intervalMs = 100,
  what = "the condition",
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what} not reached within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
