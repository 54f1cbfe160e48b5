import type { Keys } from "../keys.js";
import { callRedis, type Redis } from "./redis.js";

/** How long a ticket may wait for its WebSocket, in seconds. */
const TICKET_TTL_SECONDS = 60;

async function digestOf(ticket: string): Promise<string> {
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(ticket)));
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Single-use tickets for WebSocket handshakes, which a browser cannot sign: a signed request
 * obtains one for its signer, and one upgrade redeems it (GETDEL: a second use finds nothing).
 */
export class TicketStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /** A new ticket for `keyid`, valid for TICKET_TTL_SECONDS; `expiresAt` in epoch seconds. */
  async issue(keyid: string): Promise<{ ticket: string; expiresAt: number }> {
    const ticket = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))))
      .replace(/\+/g, "-")
      .replace(/\//g, "_")
      .replace(/=+$/, "");
    const key = this.keys.ticket(await digestOf(ticket));
    await callRedis(() => this.redis.exec(["SET", key, keyid, "EX", String(TICKET_TTL_SECONDS)]));
    return { ticket, expiresAt: Math.floor(Date.now() / 1000) + TICKET_TTL_SECONDS };
  }

  /** The keyid a ticket was issued to, once: null when it is unknown, used or expired. */
  async redeem(ticket: string): Promise<string | null> {
    if (!/^[A-Za-z0-9_-]{43}$/.test(ticket)) return null;
    const key = this.keys.ticket(await digestOf(ticket));
    return callRedis(() => this.redis.exec<string | null>(["GETDEL", key]));
  }
}
