import path from "node:path";
import { generateKeyPair } from "../../shared/auth/index.js";
import type { Command } from "../command.js";
import { profileKeyFile, writeProfile, type Profile } from "../config.js";
import { UsageError } from "../errors.js";
import { writePrivateKey } from "../keyfile.js";
import { fields, shortKey } from "../output.js";
import { keySession } from "../session.js";

const keygen: Command = {
  name: "keygen",
  summary: "generate an Ed25519 key pair into a file",
  usage: "keygen --out <file> [--force]",
  options: {
    out: { type: "string", value: "<file>", help: "where to write the private key (a JWK, mode 0600)" },
    force: { type: "boolean", help: "overwrite an existing file (its key is lost)" },
  },
  details: "Prints the public key (the JWK's x), which is what the coordinator stores as pubkey.",
  examples: ["flowc keygen --out ~/.config/flowc/key.json"],
  async run({ options, cwd, out }) {
    const given = options.string("out");
    if (given === undefined) throw new UsageError("missing option --out <file>", "keygen");
    const file = path.resolve(cwd, given);
    const jwk = await generateKeyPair();
    writePrivateKey(file, jwk, options.flag("force"));
    out.result({ file, pubkey: jwk.x }, [`key pair written to ${file} (mode 0600)`, ...fields([["pubkey", jwk.x]])]);
  },
};

const init: Command = {
  name: "init",
  summary: "write the profile: coordinator URL, key file, actor id",
  usage: "init --url <coordinator url> --key-file <file> [--actor <id>]",
  details: [
    "Writes the profile file (--profile, FLOWC_PROFILE, or ~/.config/flowc/profile.json) with the",
    "URL, the key file's absolute path and, if given, the actor id. URL and key file may also come",
    "from FLOWC_URL / FLOWC_KEY_FILE or the existing profile; the key file must hold a private key.",
    "Changing the key file forgets the actor id unless --actor names one (it belonged to the old key).",
  ].join("\n"),
  examples: ["flowc init --url https://coordinator.example --key-file ~/.config/flowc/key.json"],
  async run(invocation) {
    // The settings and key a registration would use: init checks them the same way.
    const { config, url, keyFile, jwk } = keySession(invocation, "init");
    const profile: Profile = { url, key_file: keyFile };
    // An actor id is only meaningful with the key it was registered with.
    const sameKey = profileKeyFile(config) === keyFile;
    if (
      config.actorId &&
      (config.actorId.source === "--actor" || config.actorId.source === "FLOWC_ACTOR_ID" || sameKey)
    ) {
      profile.actor_id = config.actorId.value;
    }
    writeProfile(config.profilePath, profile);
    invocation.out.result({ profile: config.profilePath, ...profile, pubkey: jwk.x }, [
      `profile written to ${config.profilePath}`,
      ...fields([
        ["url", url],
        ["key_file", keyFile],
        ["pubkey", shortKey(jwk.x)],
        ["actor_id", profile.actor_id === undefined ? "- (flowc actor register sets it)" : String(profile.actor_id)],
      ]),
    ]);
  },
};

/** Commands that work on local files only: making a key and writing the profile. */
export const keyCommands: Command[] = [keygen, init];
