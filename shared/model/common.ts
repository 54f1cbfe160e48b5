import { z } from "zod";
import { formatBytes, jsonBytes, SIZE_LIMITS } from "./limits.js";

/** Object identifiers are u32, as in the model; 0 is never a valid id. */
export const MAX_ID = 4_294_967_295;
export const Id = z.int().min(1).max(MAX_ID);
export type Id = z.infer<typeof Id>;

/**
 * Whether `text` is an id written plainly (no sign, leading zero or exponent) that `Id` accepts,
 * so an id read from text (a keyid, a command-line argument) is echoed back as it was given.
 */
export function isIdText(text: string): boolean {
  return /^[1-9]\d{0,9}$/.test(text) && Number(text) <= MAX_ID;
}

/** A page of a listing. `next` is the offset of the following page, absent on the last one. */
export interface Page<T> {
  items: T[];
  total: number;
  next?: number;
}

/** Unix epoch seconds (the model's `u32` timestamps). */
export const Timestamp = z.int().min(0).max(MAX_ID);
export type Timestamp = z.infer<typeof Timestamp>;

/** Seconds, as every timeout in the model. */
export const Seconds = z.int().min(0).max(MAX_ID);

/** Environment variable names a shell accepts. */
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
export const EnvVars = z.record(
  z.string().regex(ENV_NAME, "an environment variable name: letters, digits and _, not starting with a digit"),
  z.string(),
);
export type EnvVars = z.infer<typeof EnvVars>;

/**
 * Environment variables as a submission gives them (a flow's, a job's own): at most
 * `SIZE_LIMITS.env` bytes as JSON. Records and deliveries use `EnvVars`: a delivery's environment
 * also holds the coordinator's variables and the job's inputs.
 */
export const EnvVarsInput = EnvVars.refine((env) => jsonBytes(env) <= SIZE_LIMITS.env, {
  message: `environment variables are at most ${formatBytes(SIZE_LIMITS.env)} as JSON`,
});

/** A job's result: string keys to string values (the model's `map[string]string`). */
export const ResultMap = z.record(z.string().min(1), z.string());
export type ResultMap = z.infer<typeof ResultMap>;

const base64url = /^[A-Za-z0-9_-]+$/;

/**
 * An Ed25519 public key: the 32 raw bytes, base64url without padding (43 characters), the form a
 * JWK's `x` uses. Standard base64 (with `+`, `/`, `=`) is not accepted, so one key has one text.
 */
export const PublicKey = z
  .string()
  .length(43, "an Ed25519 public key: 32 bytes, base64url without padding (43 characters)")
  .regex(base64url, "an Ed25519 public key: base64url characters only");

/** An http(s) URL; whether plain http is acceptable is a deployment setting checked by the API. */
export const WebUrl = z.url({ protocol: /^https?$/ }).max(2048);

/**
 * Where an actor can be reached. The model's addresses are Mycelium topics; this coordinator
 * delivers over HTTPS, so an address is one of the two kinds.
 */
export const Address = z.discriminatedUnion("type", [
  z.object({ type: z.literal("https"), url: WebUrl }).strict(),
  z
    .object({ type: z.literal("mycelium"), address: z.string().min(1).max(512), topic: z.string().max(256).optional() })
    .strict(),
]);
export type Address = z.infer<typeof Address>;

/** One log line of a job, attached to its message. `timestamp` is epoch seconds, fractional allowed. */
export const Log = z
  .object({
    timestamp: z.number().min(0),
    stream: z.enum(["stdout", "stderr", "system"]),
    message: z.string().max(SIZE_LIMITS.logLine),
  })
  .strict();
export type Log = z.infer<typeof Log>;
