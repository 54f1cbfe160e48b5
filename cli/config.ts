import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";
import { Id, WebUrl } from "../shared/model/index.js";
import { isIdText } from "../shared/model/index.js";
import type { GlobalFlags } from "./command.js";
import { ConfigError, UsageError } from "./errors.js";

/** The profile file: where the coordinator is and who we are there. */
export interface Profile {
  url?: string;
  key_file?: string;
  actor_id?: number;
}

/** A configured value and where it came from, so errors and notes can name the source. */
export interface Setting<T> {
  value: T;
  source: string;
}

/** Settings after applying precedence: command-line flag > environment variable > profile. */
export interface ResolvedConfig {
  profilePath: string;
  /** The profile as read; null when the file does not exist. */
  profile: Profile | null;
  url?: Setting<string>;
  /** Absolute path of the private key file. */
  keyFile?: Setting<string>;
  actorId?: Setting<number>;
}

const PROFILE_HELP = "flowc init writes it";

/** The profile path: `--profile`, else FLOWC_PROFILE, else ~/.config/flowc/profile.json. */
export function profilePath(globals: GlobalFlags, env: NodeJS.ProcessEnv, cwd: string): string {
  const given = globals.profile ?? (env.FLOWC_PROFILE || undefined);
  // homedir() follows $HOME, which is what lets a test (or a user) point the default elsewhere.
  return given ? path.resolve(cwd, given) : path.join(homedir(), ".config", "flowc", "profile.json");
}

/** Reads a profile file; null when there is none, a ConfigError naming the file when it is unusable. */
export function readProfile(file: string): Profile | null {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw new ConfigError(`cannot read the profile ${file}: ${(error as Error).message}`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ConfigError(`the profile ${file} is not JSON; fix it or run flowc init again`);
  }
  if (!value || typeof value !== "object" || Array.isArray(value))
    throw new ConfigError(`the profile ${file} must be a JSON object`);
  const raw = value as Record<string, unknown>;
  const profile: Profile = {};
  if (raw.url !== undefined) {
    if (typeof raw.url !== "string") throw new ConfigError(`the profile ${file}: "url" must be a string`);
    profile.url = raw.url;
  }
  if (raw.key_file !== undefined) {
    if (typeof raw.key_file !== "string") throw new ConfigError(`the profile ${file}: "key_file" must be a string`);
    profile.key_file = raw.key_file;
  }
  if (raw.actor_id !== undefined && raw.actor_id !== null) {
    if (!Id.safeParse(raw.actor_id).success)
      throw new ConfigError(`the profile ${file}: "actor_id" must be a positive integer`);
    profile.actor_id = raw.actor_id as number;
  }
  return profile;
}

/**
 * Writes the profile: to a temporary file first and renamed over the old one, so an interrupted
 * write never leaves half a profile behind.
 */
export function writeProfile(file: string, profile: Profile): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, `${JSON.stringify(profile, null, 2)}\n`, { mode: 0o600 });
  renameSync(temporary, file);
}

/** Applies the precedence rules. A malformed flag is a usage error; a malformed variable or profile field a config error. */
export function resolveConfig(
  globals: GlobalFlags,
  env: NodeJS.ProcessEnv,
  cwd: string,
  command: string,
): ResolvedConfig {
  const file = profilePath(globals, env, cwd);
  const profile = readProfile(file);
  const config: ResolvedConfig = { profilePath: file, profile };
  const inProfile = (field: string) => `profile ${file} ("${field}")`;

  if (globals.url !== undefined) config.url = { value: globals.url, source: "--url" };
  else if (env.FLOWC_URL) config.url = { value: env.FLOWC_URL, source: "FLOWC_URL" };
  else if (profile?.url) config.url = { value: profile.url, source: inProfile("url") };

  if (globals.keyFile !== undefined)
    config.keyFile = { value: path.resolve(cwd, globals.keyFile), source: "--key-file" };
  else if (env.FLOWC_KEY_FILE)
    config.keyFile = { value: path.resolve(cwd, env.FLOWC_KEY_FILE), source: "FLOWC_KEY_FILE" };
  // A relative key_file belongs with the profile (both may be moved together), not with the cwd.
  else if (profile?.key_file)
    config.keyFile = { value: path.resolve(path.dirname(file), profile.key_file), source: inProfile("key_file") };

  if (globals.actor !== undefined) {
    config.actorId = { value: parseActorId(globals.actor, "--actor", command), source: "--actor" };
  } else if (env.FLOWC_ACTOR_ID) {
    config.actorId = { value: parseActorId(env.FLOWC_ACTOR_ID, "FLOWC_ACTOR_ID"), source: "FLOWC_ACTOR_ID" };
  } else if (profile?.actor_id !== undefined) {
    config.actorId = { value: profile.actor_id, source: inProfile("actor_id") };
  }
  return config;
}

/** An actor id from a flag (a usage error when malformed, naming `command`) or a variable (a config error). */
function parseActorId(text: string, source: string, command?: string): number {
  if (isIdText(text)) return Number(text);
  const message = `${source} must be a positive integer actor id, not ${JSON.stringify(text)}`;
  throw command === undefined ? new ConfigError(message) : new UsageError(message, command);
}

/** The coordinator URL, checked to be http(s); the error says every place it can be set. */
export function requireUrl(config: ResolvedConfig): string {
  if (!config.url) {
    throw new ConfigError(
      `no coordinator URL: pass --url, set FLOWC_URL, or set "url" in the profile ${config.profilePath} (${PROFILE_HELP})`,
    );
  }
  if (!WebUrl.safeParse(config.url.value).success) {
    throw new ConfigError(`${config.url.source}: ${JSON.stringify(config.url.value)} is not an http(s) URL`);
  }
  return config.url.value.replace(/\/+$/, "");
}

/** The key file setting; the error names every place it can be set. */
export function requireKeyFile(config: ResolvedConfig): Setting<string> {
  if (!config.keyFile) {
    throw new ConfigError(
      `no key file: pass --key-file, set FLOWC_KEY_FILE, or set "key_file" in the profile ${config.profilePath} (flowc keygen makes a key, ${PROFILE_HELP})`,
    );
  }
  return config.keyFile;
}

/** The caller's actor id; without one only registration is possible, so the error says how to get one. */
export function requireActorId(config: ResolvedConfig): number {
  if (!config.actorId) {
    throw new ConfigError(
      `no actor id: run flowc actor register, or pass --actor, set FLOWC_ACTOR_ID, or set "actor_id" in the profile ${config.profilePath}`,
    );
  }
  return config.actorId.value;
}

/**
 * Merges `patch` into the profile file, creating it from the settings in use when there is none,
 * so that what just worked from flags or variables keeps working without them.
 */
export function saveToProfile(config: ResolvedConfig, patch: Profile): Profile {
  const base: Profile = config.profile ?? {};
  const profile: Profile = { ...base };
  if (profile.url === undefined && config.url) profile.url = config.url.value;
  if (profile.key_file === undefined && config.keyFile) profile.key_file = config.keyFile.value;
  if (profile.actor_id === undefined && config.actorId) profile.actor_id = config.actorId.value;
  Object.assign(profile, patch);
  writeProfile(config.profilePath, profile);
  return profile;
}

/** The key file the profile names, as an absolute path (undefined when it names none). */
export function profileKeyFile(config: ResolvedConfig): string | undefined {
  const file = config.profile?.key_file;
  return file === undefined ? undefined : path.resolve(path.dirname(config.profilePath), file);
}
