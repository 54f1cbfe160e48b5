import { z } from "zod";
import { importPublicKey, KEY_DIRECTORY_PATH, PrivateJwk } from "../shared/auth/index.js";

/** Entries we can use (public Ed25519 JWKs); anything else the directory may hold (other key types) is skipped. */
const Entry = PrivateJwk.omit({ d: true }).extend({
  kid: z.string().min(1),
  status: z.string().optional(),
});
const Directory = z.object({ keys: z.array(z.unknown()) });

/** Refetches on an unknown kid at most this often, so forged keyids cannot make us hammer the coordinator. */
const MIN_REFRESH_MS = 10_000;

/**
 * The coordinator's public keys, by kid (the `keyid` its delivery signatures carry). Loaded at
 * startup and again when a signature names a kid we do not know (a rotation happened), at most
 * once per MIN_REFRESH_MS; keys that left the directory are forgotten at the next load.
 */
export class CoordinatorKeyDirectory {
  private keys = new Map<string, CryptoKey>();
  private lastLoad = -Infinity;
  private loading: Promise<void> | undefined;

  constructor(
    private readonly baseUrl: string,
    private readonly warn: (line: string) => void,
  ) {}

  /** Loads the directory now (one load at a time); failures are reported and leave the keys as they were. */
  load(): Promise<void> {
    this.loading ??= this.fetchDirectory().finally(() => (this.loading = undefined));
    return this.loading;
  }

  /** The key for a signature's keyid, refreshing the directory (rate-limited) when it is unknown. */
  async resolve(kid: string): Promise<CryptoKey | null> {
    const known = this.keys.get(kid);
    if (known) return known;
    if (Date.now() - this.lastLoad >= MIN_REFRESH_MS) await this.load();
    else if (this.loading) await this.loading;
    return this.keys.get(kid) ?? null;
  }

  private async fetchDirectory(): Promise<void> {
    this.lastLoad = Date.now();
    const url = new URL(KEY_DIRECTORY_PATH, this.baseUrl).href;
    try {
      const response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
      if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
      const directory = Directory.parse(await response.json());
      const next = new Map<string, CryptoKey>();
      for (const raw of directory.keys) {
        const entry = Entry.safeParse(raw);
        // `current` signs now, `next` is published ahead of a rotation: both are trusted.
        if (entry.success && (entry.data.status === undefined || ["current", "next"].includes(entry.data.status))) {
          next.set(entry.data.kid, await importPublicKey(entry.data.x));
        }
      }
      if (next.size === 0) throw new Error("the directory lists no Ed25519 key");
      this.keys = next;
    } catch (error) {
      this.warn(`cannot load the coordinator's keys from ${url}: ${(error as Error).message}`);
    }
  }
}
