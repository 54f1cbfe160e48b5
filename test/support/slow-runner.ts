import { createServer } from "node:http";

/** How long the slow runner holds each request before it answers. */
export const SLOW_RUNNER_DELAY_MS = 2_000;

/**
 * A runner that takes nothing, slowly: it answers every request 503 after SLOW_RUNNER_DELAY_MS.
 * A delivery to it is refused, as one to an address where nothing listens, but not at once, so
 * a test can look at what holds while the delivery is under way (an address where nothing
 * listens is refused within a millisecond, often before the test's next call).
 */
export async function startSlowRunner(port: number): Promise<{ close(): Promise<void> }> {
  const server = createServer((request, response) => {
    request.resume();
    const timer = setTimeout(() => response.writeHead(503).end("slow runner: takes nothing"), SLOW_RUNNER_DELAY_MS);
    response.on("close", () => clearTimeout(timer));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", resolve);
  });
  return {
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
