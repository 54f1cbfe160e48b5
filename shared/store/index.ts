export { Store, epochSeconds } from "./store.js";
export { connectRedis, callRedis } from "./redis.js";
export type { Redis, RedisConfig } from "./redis.js";
export * from "./errors.js";
export { Repository } from "./repository.js";
export type { CreateInput, Page, Patch, RecordRef } from "./repository.js";
export { codecs } from "./layouts.js";
