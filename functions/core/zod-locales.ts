/**
 * zod's `locales` as the Worker's bundle has them: English, the one zod itself configures, and
 * nothing else. zod re-exports all of its ~50 locales as a namespace (`z.locales`,
 * `z.core.locales`), which esbuild cannot tree-shake, and @hono/zod-openapi hands the whole `z`
 * to a function, so every locale landed in the script: 364 KiB of 1.6 MiB, parsed at every cold
 * start and never used (error messages are English; nothing calls `z.config(z.locales.xx())`).
 * wrangler.toml's `[alias]` points zod's own `../locales/index.js` imports here; nothing else
 * imports that path. Code run by Node (the CLI, the runner) still gets zod's full set.
 */
export { default as en } from "zod/v4/locales/en.js";
