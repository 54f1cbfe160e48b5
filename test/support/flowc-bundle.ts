import { createHash } from "node:crypto";
import path from "node:path";
import { build } from "esbuild";

/**
 * The CLI the tests run: `cli/main.ts` bundled once per test run by esbuild (the project's own
 * code in one file, its packages imported from node_modules as usual). It is the same code a
 * user runs through `npm run cli` (`node --import tsx cli/main.ts`), without tsx compiling every
 * module again at each start: a `flowc --help` starts in about 0.2 s instead of 1 s, and the
 * suite starts several hundred of them. It sits inside node_modules so that its bare imports
 * resolve as the sources' do.
 */

const root = path.resolve(import.meta.dirname, "../..");

/**
 * Where the bundle is written (global-setup.ts) and run from (flowc.ts): named after the
 * checkout, since git worktrees may share one node_modules (a symlink) and each must run its
 * own CLI.
 */
export const FLOWC_BUNDLE = path.join(
  root,
  "node_modules",
  ".cache",
  "flowc-test",
  `flowc-${createHash("sha256").update(root).digest("hex").slice(0, 12)}.mjs`,
);

/** Bundles the CLI to FLOWC_BUNDLE (about half a second). */
export async function buildFlowcBundle(): Promise<void> {
  await build({
    entryPoints: [path.join(root, "cli", "main.ts")],
    outfile: FLOWC_BUNDLE,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    packages: "external",
    logLevel: "warning",
  });
}
