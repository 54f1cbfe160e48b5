import net from "node:net";
import type { AddressInfo } from "node:net";

/** A listening DelayProxy. */
export interface DelayProxy {
  /** `http://127.0.0.1:<port>/`: what to register as the runner's address. */
  address: string;
  close(): Promise<void>;
}

/**
 * A TCP proxy on a free port of 127.0.0.1 in front of `127.0.0.1:<targetPort>` that passes what
 * comes in at once and holds back what goes out (the answers) `delayMs`, in order: a runner seen
 * through it answers each POST that much later, though it took the request and started on it at
 * once. Bytes pass untouched (the Host header too, so a signature's `@target-uri`, the proxy's
 * address, is what the runner verifies). A side that closes closes the other, the answers still
 * held back going first.
 */
export async function startDelayProxy(targetPort: number, delayMs: number): Promise<DelayProxy> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, "127.0.0.1");
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    // Each chunk of the answer goes out delayMs after it came, so their order holds.
    let pending = Promise.resolve();
    upstream.on("data", (chunk: Buffer) => {
      const due = Date.now() + delayMs;
      pending = pending.then(
        () =>
          new Promise((resolve) =>
            setTimeout(
              () => {
                if (!client.destroyed) client.write(chunk);
                resolve();
              },
              Math.max(0, due - Date.now()),
            ),
          ),
      );
    });
    upstream.on("end", () => void pending.then(() => client.end()));
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("close", drop);
    client.on("error", drop);
    upstream.on("error", drop);
    upstream.on("close", () => void pending.then(drop));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    address: `http://127.0.0.1:${port}/`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
