export { createApp } from "./app.js";
export { Problem } from "./problem.js";
export type { AppEnv } from "./store.js";
