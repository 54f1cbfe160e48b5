export { contentDigest, checkContentDigest } from "./digest.js";
export { randomHex, randomToken, toBase64Url } from "./encoding.js";
export { actorKeyId, bareKeyId, parseKeyId, runnerKeyId } from "./keyid.js";
export type { KeyId } from "./keyid.js";
export {
  generateKeyPair,
  importPrivateKey,
  importPublicKey,
  keyThumbprint,
  parsePrivateJwk,
  PrivateJwk,
  PublicJwk,
} from "./keys.js";
export { PRIMARY_LABEL, signedRequest, signRequest } from "./sign.js";
export type { RequestSigner, SignOptions } from "./sign.js";
export { signAnswer, verifyAnswer } from "./answer.js";
export { AuthError, verifyRequest } from "./verify.js";
export type { AuthFailure, VerifiedRequest } from "./verify.js";
export { decide, isMember, PERMISSION_LISTS } from "./permissions.js";
export type { Access, Decision, PermissionList } from "./permissions.js";
export { KEY_DIRECTORY_PATH } from "./directory.js";
