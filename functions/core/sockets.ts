/**
 * Answers a WebSocket's close: a peer that closed is closed back with its code (1005 "no status"
 * and 1006 "abnormal" may not be sent, so they become 1000), and a socket already gone is left be.
 */
export function closeQuietly(socket: WebSocket, code: number, reason: string): void {
  try {
    socket.close(code === 1005 || code === 1006 ? 1000 : code, reason);
  } catch {
    // Already closed.
  }
}
