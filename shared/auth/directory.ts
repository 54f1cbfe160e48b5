/**
 * Where the coordinator publishes its signing keys (the RFC 9421 key directory): the one path the
 * coordinator serves, its client reads and runners verify deliveries against.
 */
export const KEY_DIRECTORY_PATH = "/.well-known/http-message-signatures-directory";
