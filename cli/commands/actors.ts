import path from "node:path";
import { bareKeyId, type RequestSigner } from "../../shared/auth/index.js";
import { signerFromJwk } from "../../shared/client/index.js";
import { WebUrl, type Actor, type Address } from "../../shared/model/index.js";
import { parseId, type Command } from "../command.js";
import { profileKeyFile, saveToProfile } from "../config.js";
import { ConfigError, UsageError } from "../errors.js";
import { keyOwner, runnersText } from "../key-owner.js";
import { readPrivateKey } from "../keyfile.js";
import { fields, shortKey, timestamp, type Output } from "../output.js";
import { actorSession, keySession, type Session } from "../session.js";

function describeAddress(address: Address): string {
  return address.type === "https"
    ? address.url
    : `mycelium ${address.address}${address.topic ? ` (topic ${address.topic})` : ""}`;
}

function printActor(out: Output, actor: Actor): void {
  out.result(
    actor,
    fields([
      ["actor", String(actor.id)],
      ["pubkey", actor.pubkey],
      ["address", actor.address.length > 0 ? actor.address.map(describeAddress).join(", ") : "-"],
      ["created", timestamp(actor.created_at)],
      ["updated", timestamp(actor.updated_at)],
    ]),
  );
}

/**
 * Keeps the new actor id with the key it belongs to: the profile is updated (or created) only
 * when it names the key just registered, so an id never ends up beside another actor's key.
 */
function rememberActorId(session: Session, actorId: number, out: Output): void {
  const { config } = session;
  const keyFile = config.keyFile?.value;
  const profileKey = profileKeyFile(config);
  if (profileKey !== undefined && profileKey !== keyFile) {
    out.note(
      `actor id not saved: the profile ${config.profilePath} names another key file; use --actor ${actorId} or FLOWC_ACTOR_ID=${actorId}`,
    );
    return;
  }
  if (config.profile?.actor_id === actorId) return;
  saveToProfile(config, { actor_id: actorId });
  out.note(`actor id ${actorId} saved to ${config.profilePath}`);
}

const register: Command = {
  name: "actor register",
  summary: "register your key as an actor and save its id in the profile",
  usage: "actor register [--id <n>] [--address <https url>]... [--operator-key <file>]",
  options: {
    id: { type: "string", value: "<n>", help: "ask for this actor id (default: the next free one)" },
    address: {
      type: "string",
      multiple: true,
      value: "<url>",
      help: "an https URL results are delivered to (repeatable)",
    },
    "operator-key": {
      type: "string",
      value: "<file>",
      help: "an operator's private key, when the coordinator requires a countersignature",
    },
  },
  details: [
    "The request is signed by your key itself (proof of possession). Registering a registered key again returns its actor.",
    "A key registered for a runner is refused, named: an actor signs with a key of its own.",
  ].join("\n"),
  examples: [
    "flowc actor register",
    "flowc actor register --address https://me.example/results --operator-key operator.json",
  ],
  async run(invocation) {
    const { options, out, cwd } = invocation;
    const session = keySession(invocation, "actor register");
    const idText = options.string("id");
    const address = options.list("address").map((url): Address => {
      if (!WebUrl.safeParse(url).success)
        throw new UsageError(`--address must be an http(s) URL, not ${JSON.stringify(url)}`, "actor register");
      return { type: "https", url };
    });
    const operatorFile = options.string("operator-key");
    let operator: RequestSigner | undefined;
    if (operatorFile !== undefined) {
      const jwk = readPrivateKey(path.resolve(cwd, operatorFile), "--operator-key");
      // The coordinator identifies operators by their bare public key, not by any actor id.
      operator = await signerFromJwk(jwk, bareKeyId(jwk.x));
    }
    const input = { ...(idText !== undefined ? { id: parseId(idText, "--id", "actor register") } : {}), address };
    // A runner's key made into an actor's too would sign as both: said and refused before anything is written.
    const owner = await keyOwner(session.url, session.jwk);
    if (owner && owner.actor_id === undefined && owner.runners.length > 0) {
      throw new ConfigError(
        `the key in ${session.keyFile} is the key of ${runnersText(owner.runners)}, not an actor's: register an actor with a key of its own (flowc keygen --out <file>, then flowc init --key-file <file>)`,
      );
    }
    const actor = await session.client.registerActor(session.jwk, input, operator);
    rememberActorId(session, actor.id, out);
    out.result(actor, [`actor ${actor.id} registered (pubkey ${shortKey(actor.pubkey)})`]);
  },
};

const show: Command = {
  name: "actor show",
  summary: "show an actor (default: yourself)",
  usage: "actor show [<id>]",
  args: ["id?"],
  examples: ["flowc actor show", "flowc actor show 7 --json"],
  async run(invocation) {
    const session = await actorSession(invocation, "actor show");
    const [idText] = invocation.args;
    const id = idText === undefined ? session.actorId : parseId(idText, "<id>", "actor show");
    printActor(invocation.out, await session.client.loadActor(id));
  },
};

const rotateKey: Command = {
  name: "actor rotate-key",
  summary: "replace your actor's key with another one",
  usage: "actor rotate-key --new-key <file>",
  options: {
    "new-key": { type: "string", value: "<file>", help: "the new private key (flowc keygen makes one)" },
  },
  details:
    "Signed by the current key and countersigned by the new one; the old key stops working at once.\nThe profile's key_file is then set to the new file.",
  examples: [
    "flowc keygen --out ~/.config/flowc/key-2.json",
    "flowc actor rotate-key --new-key ~/.config/flowc/key-2.json",
  ],
  async run(invocation) {
    const { options, cwd, out } = invocation;
    const given = options.string("new-key");
    if (given === undefined) throw new UsageError("missing option --new-key <file>", "actor rotate-key");
    const file = path.resolve(cwd, given);
    const next = readPrivateKey(file, "--new-key");
    const session = await actorSession(invocation, "actor rotate-key");
    const { actor } = await session.client.rotateKey(session.actorId, next);
    saveToProfile(session.config, { key_file: file, actor_id: actor.id });
    out.note(`key_file in ${session.config.profilePath} now names ${file}`);
    const source = session.config.keyFile?.source;
    if (source === "--key-file" || source === "FLOWC_KEY_FILE")
      out.note(`${source} still names the old key: point it at ${file}`);
    out.result(actor, [`actor ${actor.id} now uses key ${shortKey(actor.pubkey)} (${file})`]);
  },
};

/** The `actor` commands. */
export const actorCommands: Command[] = [register, show, rotateKey];
