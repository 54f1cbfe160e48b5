export { startRestServer, DEFAULT_REST_OPTIONS } from "./server.js";
export type { RestServer, RestServerOptions } from "./server.js";
