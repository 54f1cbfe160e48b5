import type { Actor } from "../../shared/model/index.js";
import { Api, describeError, readAnswer } from "./api.js";
import { h } from "./dom.js";
import { importSigningKey, parseKeyFile, saveSession, type Session } from "./keystore.js";

/**
 * Sign-in: the actor's `flowc` key file is read in the page, its private key imported into
 * WebCrypto as a non-extractable key and kept in IndexedDB; the file's text is dropped at once.
 * Only signatures ever reach the coordinator. The actor id comes from the form, from the file
 * when it carries one, or from the coordinator: registering a key that is already registered
 * answers the actor it belongs to (signed with the bare key, `key:<pubkey>`).
 */

/** Finds the actor a key belongs to; a key nobody registered is registered now (said in the notice). */
async function actorOfKey(x: string, key: CryptoKey): Promise<{ actor: Actor; created: boolean }> {
  const response = await new Api({ keyid: `key:${x}`, key }).send("POST", "/v1/actors", { pubkey: x });
  const actor = (await readAnswer(response)) as Actor;
  return { actor, created: response.status === 201 };
}

/** Checks that the key signs as the actor: the coordinator verifies the signature with the actor's key. */
async function verify(actorId: number, x: string, key: CryptoKey): Promise<void> {
  const api = new Api({ keyid: `actor:${actorId}`, key });
  let actor: Actor;
  try {
    actor = await api.get<Actor>(`/v1/actors/${actorId}`);
  } catch (error) {
    throw new Error(`this key does not sign as actor ${actorId}: ${describeError(error)}`, { cause: error });
  }
  if (actor.pubkey !== x) throw new Error(`actor ${actorId} is registered with another key`);
}

/** The sign-in page; calls `done` with the stored session. */
export function signInPage(main: HTMLElement, done: (session: Session, note?: string) => void): void {
  const file = h("input", {
    type: "file",
    id: "key-file",
    name: "key-file",
    accept: ".json,application/json",
    required: true,
    "aria-describedby": "key-help",
  });
  const actor = h("input", {
    type: "text",
    id: "actor-id",
    name: "actor-id",
    inputmode: "numeric",
    pattern: "[1-9][0-9]{0,9}",
    autocomplete: "off",
    "aria-describedby": "actor-help",
  });
  const error = h("p", { class: "form-error", role: "alert" });
  const submit = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h(
    "form",
    { class: "card signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "Sign in"),
    h("label", { for: "key-file" }, "Key file"),
    file,
    h(
      "p",
      { id: "key-help", class: "help" },
      "The private key file flowc uses (flowc keygen writes one; npm start leaves .dev/demo/actor-key.json). ",
      "It stays in this browser: imported into WebCrypto as a key that cannot be read back, kept in IndexedDB, and used ",
      "here to sign each request. Nothing secret is sent to the coordinator.",
    ),
    h("label", { for: "actor-id" }, "Actor id (optional)"),
    actor,
    h(
      "p",
      { id: "actor-help", class: "help" },
      "Leave it empty to ask the coordinator which actor the key belongs to (a key it does not know yet is registered as a new actor, as flowc actor register does).",
    ),
    error,
    submit,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    error.textContent = "";
    submit.disabled = true;
    void signIn(file, actor.value.trim())
      .then(({ session, note }) => done(session, note))
      .catch((e: unknown) => {
        error.textContent = describeError(e);
        submit.disabled = false;
      });
  });
  main.replaceChildren(form);
  file.focus();
}

async function signIn(input: HTMLInputElement, typedId: string): Promise<{ session: Session; note?: string }> {
  const chosen = input.files?.[0];
  if (!chosen) throw new Error("choose your key file");
  if (typedId && !/^[1-9]\d{0,9}$/.test(typedId)) throw new Error("the actor id is a positive whole number");
  const keyFile = parseKeyFile(await chosen.text());
  const key = await importSigningKey(keyFile);
  input.value = ""; // the page keeps no handle on the file
  let actorId = typedId ? Number(typedId) : keyFile.actorId;
  let note: string | undefined;
  if (actorId === undefined) {
    const found = await actorOfKey(keyFile.x, key);
    actorId = found.actor.id;
    if (found.created) note = `this key was not registered: it is now actor ${actorId}`;
  }
  await verify(actorId, keyFile.x, key);
  const session: Session = { actorId, keyid: `actor:${actorId}`, pubkey: keyFile.x, key };
  await saveSession(session);
  return note ? { session, note } : { session };
}
