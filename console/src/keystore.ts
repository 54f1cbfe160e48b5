/**
 * Where the signed-in actor's key lives: IndexedDB, as a non-extractable WebCrypto CryptoKey.
 * IndexedDB stores a CryptoKey by structured clone, so the key survives a reload while no script
 * (this page's included) can ever read its bytes back; it only signs. Sign-out deletes it.
 */

/** The signed-in actor: who signs (`actor:<id>`) and with which key. */
export interface Session {
  actorId: number;
  /** `actor:<id>`, the RFC 9421 keyid of every request. */
  keyid: string;
  /** The public key (JWK `x`), to check it is still the actor's. */
  pubkey: string;
  /** The private key, non-extractable, usable for `sign` only. */
  key: CryptoKey;
}

const DB = "flowc-console";
const STORE = "session";
const CURRENT = "current";

function open(): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(DB, 1);
    request.onupgradeneeded = () => request.result.createObjectStore(STORE);
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error ?? new Error("IndexedDB is not available"));
  });
}

/** Runs one request in a transaction and resolves once the transaction is durable. */
async function run<T>(mode: IDBTransactionMode, use: (store: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  const db = await open();
  try {
    return await new Promise<T>((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const request = use(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = () => reject(tx.error ?? new Error("IndexedDB transaction failed"));
      tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    });
  } finally {
    db.close();
  }
}

/** The stored session, or undefined when nobody is signed in. */
export async function loadSession(): Promise<Session | undefined> {
  const value = (await run("readonly", (store) => store.get(CURRENT))) as Session | undefined;
  return value && value.key instanceof CryptoKey ? value : undefined;
}

export async function saveSession(session: Session): Promise<void> {
  await run("readwrite", (store) => store.put(session, CURRENT));
}

/** Forgets the key: after this nothing in the browser can sign as the actor. */
export async function deleteSession(): Promise<void> {
  await run("readwrite", (store) => store.delete(CURRENT));
}

/** The part of a `flowc` key file (an Ed25519 private JWK, RFC 8037) the console reads. */
export interface KeyFile {
  x: string;
  d: string;
  /** An actor id the file may carry (`actor_id`, or a keyid `actor:<id>`); flowc's own files have none. */
  actorId?: number;
}

const KEY_PART = /^[A-Za-z0-9_-]{43}$/;

/** Reads a key file's text, naming what is wrong with it; the text is not kept. */
export function parseKeyFile(text: string): KeyFile {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new Error("the file is not JSON: expected a flowc key file (an Ed25519 private JWK)");
  }
  const jwk = (value ?? {}) as Record<string, unknown>;
  if (jwk.kty !== "OKP" || jwk.crv !== "Ed25519")
    throw new Error('not an Ed25519 JWK: needs "kty": "OKP", "crv": "Ed25519"');
  if (typeof jwk.x !== "string" || !KEY_PART.test(jwk.x)) throw new Error('"x" is not an Ed25519 public key');
  if (typeof jwk.d !== "string" || !KEY_PART.test(jwk.d)) {
    throw new Error('no private key ("d"): this is a public key file; sign-in needs the private one');
  }
  const fromKeyid = typeof jwk.keyid === "string" ? /^actor:([1-9]\d{0,9})$/.exec(jwk.keyid)?.[1] : undefined;
  const actorId = typeof jwk.actor_id === "number" ? jwk.actor_id : fromKeyid ? Number(fromKeyid) : undefined;
  return { x: jwk.x, d: jwk.d, ...(actorId ? { actorId } : {}) };
}

/** Imports the private key for signing only, non-extractable: its bytes never leave WebCrypto again. */
export function importSigningKey(file: KeyFile): Promise<CryptoKey> {
  return crypto.subtle.importKey(
    "jwk",
    { kty: "OKP", crv: "Ed25519", x: file.x, d: file.d },
    { name: "Ed25519" },
    false,
    ["sign"],
  );
}
