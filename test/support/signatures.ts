import {
  isSignatureError,
  verifySignature,
  webcrypto,
  type SignatureMessage,
  type VerificationPolicy,
  type Verifier,
} from "http-message-sig";

/**
 * The RFC 9421 library's reading of a signature `label` of `message` with `key`, as an oracle for
 * the readings this project makes without it (shared/auth/verify-first.ts): the signature base it
 * built (undefined when it never got that far) and its verdict.
 */
export async function libraryReading(
  message: SignatureMessage,
  key: CryptoKey,
  policy: Omit<VerificationPolicy, "algorithms" | "clockSkew">,
  label = "sig1",
): Promise<{ base: Uint8Array | undefined; valid: boolean }> {
  let base: Uint8Array | undefined;
  try {
    await verifySignature<Verifier>(message, {
      label,
      policy: { algorithms: ["ed25519"], clockSkew: Number.MAX_SAFE_INTEGER, ...policy },
      resolveVerifier: () => {
        const verifier = webcrypto.verifier(key);
        return {
          ...verifier,
          verify: async (data: Uint8Array, signature: Uint8Array) => {
            base = data;
            return Promise.resolve(verifier.verify(data, signature)).catch(() => false);
          },
        };
      },
    });
    return { base, valid: true };
  } catch (error) {
    if (!isSignatureError(error)) throw error;
    return { base, valid: false };
  }
}
