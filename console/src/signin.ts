import type { Actor, WhoAmI } from "../../shared/model/index.js";
import { Api, ApiError, describeError, readAnswer } from "./api.js";
import { h } from "./dom.js";
import { importSigningKey, parseKeyFile, saveSession, type Session } from "./keystore.js";

/**
 * Sign-in: the actor's `flowc` key file is read in the page, its private key imported into
 * WebCrypto as a non-extractable key and kept in IndexedDB; the file's text is dropped at once.
 * Only signatures ever reach the coordinator. The actor id comes from the form, from the file
 * when it carries one, or from the coordinator: `GET /v1/whoami` signed with the bare key
 * (`key:<pubkey>`) says whose the key is. A runner's key is refused, named; a key nobody
 * registered is registered as a new actor only once the person says so.
 */

/** A key read from its file, not yet an actor's session. */
interface Held {
  x: string;
  key: CryptoKey;
}

/** What to tell a person who chose a runner's key file. */
const RUNNER_KEY_HELP =
  "The console signs in with an actor's key: flowc keygen and flowc actor register make one (npm start leaves .dev/demo/actor-key.json).";

/** `runner 2 of context 5`, `runners 2 of context 5 and 1 of context 7`. */
function runnersText(runners: WhoAmI["runners"]): string {
  const each = runners.map((r) => `${r.runner_id} of context ${r.context_id}`);
  const list = each.length <= 1 ? each.join("") : `${each.slice(0, -1).join(", ")} and ${each[each.length - 1]}`;
  return `${runners.length === 1 ? "runner" : "runners"} ${list}`;
}

/** Whose the key is, asked signed with the bare key; undefined from a coordinator without the route. */
async function ownerOf(held: Held): Promise<WhoAmI | undefined> {
  try {
    return await new Api({ keyid: `key:${held.x}`, key: held.key }).get<WhoAmI>("/v1/whoami");
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return undefined;
    throw error;
  }
}

/** Registers the key as a new actor (signed with the bare key, as flowc actor register does). */
async function register(held: Held): Promise<Actor> {
  const response = await new Api({ keyid: `key:${held.x}`, key: held.key }).send("POST", "/v1/actors", {
    pubkey: held.x,
  });
  return (await readAnswer(response)) as Actor;
}

/** Checks that the key signs as the actor: the coordinator verifies the signature with the actor's key. */
async function verify(actorId: number, held: Held): Promise<void> {
  const api = new Api({ keyid: `actor:${actorId}`, key: held.key });
  let actor: Actor;
  try {
    actor = await api.get<Actor>(`/v1/actors/${actorId}`);
  } catch (error) {
    // Say what the key is instead, when the coordinator can tell.
    const owner = await ownerOf(held).catch(() => undefined);
    const instead =
      owner?.actor_id !== undefined
        ? `: it is actor ${owner.actor_id}'s key`
        : owner && owner.runners.length > 0
          ? `: it is the key of ${runnersText(owner.runners)}, not an actor's`
          : owner
            ? ": no actor or runner is registered with it"
            : `: ${describeError(error)}`;
    throw new Error(`this key does not sign as actor ${actorId}${instead}`, { cause: error });
  }
  if (actor.pubkey !== held.x) throw new Error(`actor ${actorId} is registered with another key`);
}

/** Stores the session of a key verified to sign as the actor. */
async function finish(actorId: number, held: Held): Promise<Session> {
  await verify(actorId, held);
  const session: Session = { actorId, keyid: `actor:${actorId}`, pubkey: held.x, key: held.key };
  await saveSession(session);
  return session;
}

/** The outcome of the form: signed in, or a key nobody registered, waiting for the person's yes. */
type Outcome = { session: Session } | { unregistered: Held };

async function signIn(input: HTMLInputElement, typedId: string): Promise<Outcome> {
  const chosen = input.files?.[0];
  if (!chosen) throw new Error("choose your key file");
  if (typedId && !/^[1-9]\d{0,9}$/.test(typedId)) throw new Error("the actor id is a positive whole number");
  const keyFile = parseKeyFile(await chosen.text());
  const held: Held = { x: keyFile.x, key: await importSigningKey(keyFile) };
  input.value = ""; // the page keeps no handle on the file
  const known = typedId ? Number(typedId) : keyFile.actorId;
  if (known !== undefined) return { session: await finish(known, held) };
  const owner = await ownerOf(held);
  if (owner?.actor_id !== undefined) return { session: await finish(owner.actor_id, held) };
  if (owner && owner.runners.length > 0) {
    throw new Error(`This is the key of ${runnersText(owner.runners)}, not an actor's. ${RUNNER_KEY_HELP}`);
  }
  return { unregistered: held };
}

/** The question asked before a key nobody registered becomes a new actor's. */
function consentBox(): { box: HTMLElement; yes: HTMLButtonElement; no: HTMLButtonElement } {
  const yes = h("button", { type: "button", class: "primary" }, "Register as a new actor");
  const no = h("button", { type: "button" }, "Cancel");
  const box = h(
    "div",
    { class: "consent", role: "alertdialog", "aria-labelledby": "consent-text", hidden: true },
    h(
      "p",
      { id: "consent-text" },
      "This key is not registered: no actor or runner has it. Register it as a new actor (as flowc actor register does)? ",
      "If you meant to sign in as an existing actor, cancel and choose that actor's key file.",
    ),
    h("div", { class: "buttons" }, yes, no),
  );
  return { box, yes, no };
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
  const consent = consentBox();
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
      "Leave it empty to ask the coordinator which actor the key belongs to (a key nobody registered can then be registered as a new actor, once you say so).",
    ),
    error,
    consent.box,
    submit,
  );
  let pending: Held | undefined;
  const fail = (e: unknown) => {
    error.textContent = describeError(e);
    submit.disabled = false;
  };
  const ask = (held: Held) => {
    pending = held;
    consent.box.hidden = false;
    submit.hidden = true;
    consent.yes.focus();
  };
  const closeConsent = () => {
    pending = undefined;
    consent.box.hidden = true;
    submit.hidden = false;
    submit.disabled = false;
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    error.textContent = "";
    submit.disabled = true;
    void signIn(file, actor.value.trim())
      .then((outcome) => ("session" in outcome ? done(outcome.session) : ask(outcome.unregistered)))
      .catch(fail);
  });
  consent.no.addEventListener("click", () => {
    closeConsent();
    file.focus();
  });
  consent.yes.addEventListener("click", () => {
    const held = pending;
    if (!held) return;
    consent.yes.disabled = true;
    void register(held)
      .then(async (registered) => done(await finish(registered.id, held), `the key is now actor ${registered.id}`))
      .catch((e: unknown) => {
        closeConsent();
        fail(e);
      })
      .finally(() => (consent.yes.disabled = false));
  });
  main.replaceChildren(form);
  file.focus();
}
