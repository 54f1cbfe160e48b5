import { readFileSync } from "node:fs";
import { parsePrivateJwk } from "../../shared/auth/index.js";

/** The coordinator's secrets (docs/operations.md, "Configuration"): what it cannot start without, and the rest. */
export const COORDINATOR_SECRETS = {
  required: ["UPSTASH_REDIS_REST_URL", "UPSTASH_REDIS_REST_TOKEN", "COORDINATOR_SIGNING_KEY"],
  optional: ["COORDINATOR_SIGNING_KEY_NEXT", "METRICS_TOKEN"],
} as const;

/** The secrets could not be read: every reason at once, each saying how to give the secret. */
export class SecretsError extends Error {
  override name = "SecretsError";
}

/**
 * Reads each named secret from the environment: `NAME` holds the value, or `NAME_FILE` names a
 * file that holds it (one trailing newline dropped), as container and systemd credentials give
 * them. Both at once, an empty value and a file that cannot be read are errors, as is a
 * required secret given neither way; an optional one given neither way is left out.
 */
export function readSecrets(
  names: { required: readonly string[]; optional: readonly string[] },
  env: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const secrets: Record<string, string> = {};
  const problems: string[] = [];
  for (const name of [...names.required, ...names.optional]) {
    const direct = env[name];
    const file = env[`${name}_FILE`];
    if (direct !== undefined && file !== undefined) {
      problems.push(`${name} and ${name}_FILE are both set: give one`);
      continue;
    }
    let value = direct;
    if (file !== undefined) {
      try {
        value = readFileSync(file, "utf8").replace(/\r?\n$/, "");
      } catch (error) {
        problems.push(`${name}_FILE=${file} cannot be read: ${(error as Error).message}`);
        continue;
      }
    }
    if (value === undefined) {
      if (names.required.includes(name))
        problems.push(`${name} is missing: set ${name}, or ${name}_FILE to a file holding it`);
      continue;
    }
    if (value === "") {
      problems.push(`${name} is empty`);
      continue;
    }
    secrets[name] = value;
  }
  if (problems.length) throw new SecretsError(`secrets:\n  ${problems.join("\n  ")}`);
  return secrets;
}

/**
 * Checks the coordinator's secrets as far as can be told before it runs: the storage URL is an
 * http(s) URL and the signing keys are private Ed25519 JWKs. Throws a SecretsError naming each
 * one that is not; the values are never printed.
 */
export function checkCoordinatorSecrets(secrets: Record<string, string>): void {
  const problems: string[] = [];
  const url = secrets.UPSTASH_REDIS_REST_URL;
  if (url !== undefined) {
    let protocol = "";
    try {
      protocol = new URL(url).protocol;
    } catch {
      // reported below
    }
    if (protocol !== "http:" && protocol !== "https:")
      problems.push("UPSTASH_REDIS_REST_URL is not an http:// or https:// URL");
  }
  for (const name of ["COORDINATOR_SIGNING_KEY", "COORDINATOR_SIGNING_KEY_NEXT"]) {
    const jwk = secrets[name];
    if (jwk === undefined) continue;
    try {
      parsePrivateJwk(jwk, name);
    } catch (error) {
      // The message names the secret and the field, never the value.
      problems.push((error as Error).message);
    }
  }
  if (problems.length) throw new SecretsError(`secrets:\n  ${problems.join("\n  ")}`);
}
