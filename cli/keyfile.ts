import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { parsePrivateJwk, PrivateJwk } from "../shared/auth/index.js";
import { ConfigError } from "./errors.js";

function readText(file: string, source: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT")
      throw new ConfigError(`key file ${file} does not exist (from ${source}); flowc keygen --out ${file} makes one`);
    if (code === "EACCES") throw new ConfigError(`key file ${file} is not readable (from ${source})`);
    throw new ConfigError(`cannot read key file ${file} (from ${source}): ${(error as Error).message}`);
  }
}

/** Reads an Ed25519 private JWK; every failure is one line naming the file and the setting that chose it. */
export function readPrivateKey(file: string, source: string): PrivateJwk {
  const text = readText(file, source);
  try {
    return parsePrivateJwk(text, `key file ${file}`);
  } catch (error) {
    throw new ConfigError((error as Error).message);
  }
}

/**
 * Reads the public key (`x`) from a key file: a private JWK, or a public one (without `d`),
 * since registering someone else's runner should not need their private key.
 */
export function readPublicKey(file: string, source: string): string {
  const text = readText(file, source);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new ConfigError(`key file ${file} is not JSON: expected an Ed25519 JWK`);
  }
  // A private JWK's public part; its `d`, if any, is not needed here and not checked.
  const jwk = PrivateJwk.omit({ d: true }).safeParse(value);
  if (!jwk.success) throw new ConfigError(`key file ${file} is not an Ed25519 JWK (kty "OKP", crv "Ed25519", x)`);
  return jwk.data.x;
}

/**
 * Writes a private JWK readable by its owner only. Without `force` an existing file is never
 * touched: losing a registered key locks its actor out for good.
 */
export function writePrivateKey(file: string, jwk: PrivateJwk, force: boolean): void {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  try {
    writeFileSync(file, `${JSON.stringify(jwk)}\n`, { mode: 0o600, flag: force ? "w" : "wx" });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST")
      throw new ConfigError(`${file} already exists; pass --force to overwrite it (its key is lost then)`);
    throw new ConfigError(`cannot write ${file}: ${(error as Error).message}`);
  }
  // `mode` applies only when the file is created; an overwritten file keeps its old bits.
  chmodSync(file, 0o600);
}
