import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { gzipSync } from "node:zlib";
import { build } from "esbuild";

/**
 * Builds the static assets the Worker serves (wrangler.toml `[assets]`, folder `dist/`): the web
 * console at `/console/` (console/, bundled with esbuild) and the API reference at `/docs/` (the
 * page in console/docs/ with Scalar's standalone script copied next to it, so nothing is loaded
 * from a CDN). Runs before `npm start`, `npm run dev`, `npm test` (infra/preflight.ts) and before
 * every `wrangler dev` and `wrangler deploy` (wrangler.toml `[build]`): it is skipped when
 * nothing it reads changed since the last build, and every file is written to a temporary name
 * and renamed, so the Workers of parallel test files never read a half-written asset.
 *
 *   node --import tsx infra/console-build.ts [--force]
 */

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const out = path.join(root, "dist");
const stampFile = path.join(out, ".build-stamp");
/** What the output depends on: the console's source, the shared code it bundles, this script, the locked versions. */
const INPUTS = ["console", "shared", "infra/console-build.ts", "package-lock.json"];

/** What a build wrote (or found up to date), for the one line it prints. */
export interface ConsoleBuild {
  /** False when the previous build's output was still current. */
  built: boolean;
  /** The console's own files (script, style, page) in bytes, and gzipped. */
  bytes: number;
  gzipBytes: number;
}

function filesUnder(entry: string): string[] {
  const full = path.join(root, entry);
  if (!statSync(full).isDirectory()) return [full];
  return readdirSync(full, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => path.join(d.parentPath, d.name))
    .sort();
}

/** A digest of every input's path and content. */
function inputDigest(): string {
  const hash = createHash("sha256");
  for (const file of INPUTS.flatMap(filesUnder)) {
    hash.update(path.relative(root, file)).update("\0").update(readFileSync(file)).update("\0");
  }
  return hash.digest("hex");
}

/** Writes a file under dist/ in one step: to a temporary name first, then renamed over the old one. */
function put(relative: string, content: string | Uint8Array): string {
  const file = path.join(out, relative);
  mkdirSync(path.dirname(file), { recursive: true });
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, content);
  renameSync(temporary, file);
  return file;
}

/** Removes what an older build left in dist/ that this one did not write (a concurrent build's temporary files stay). */
function removeStale(written: Set<string>): void {
  for (const entry of readdirSync(out, { recursive: true, withFileTypes: true })) {
    const file = path.join(entry.parentPath, entry.name);
    if (entry.isFile() && !written.has(file) && !file.endsWith(".tmp")) rmSync(file, { force: true });
  }
}

/** The console's style sheets, in the order they apply. */
const STYLES = [
  "console/styles/base.css",
  "console/styles/status.css",
  "console/styles/flow.css",
  "console/styles/flow-views.css",
];

/** The console's own files as served (the page, the script, the style): what a visitor downloads. */
const CONSOLE_FILES = ["console/index.html", "console/app.js", "console/console.css"];

function measure(): Pick<ConsoleBuild, "bytes" | "gzipBytes"> {
  let bytes = 0;
  let gzipBytes = 0;
  for (const relative of CONSOLE_FILES) {
    const content = readFileSync(path.join(out, relative));
    bytes += content.length;
    gzipBytes += gzipSync(content, { level: 9 }).length;
  }
  return { bytes, gzipBytes };
}

/** Builds dist/ unless it is current (`force` builds anyway). */
export async function buildConsole(options: { force?: boolean } = {}): Promise<ConsoleBuild> {
  const digest = inputDigest();
  const current = existsSync(stampFile) && readFileSync(stampFile, "utf8") === digest;
  if (current && !options.force && CONSOLE_FILES.every((f) => existsSync(path.join(out, f)))) {
    return { built: false, ...measure() };
  }
  const bundle = await build({
    // The console, and the API reference's own script (it signs Scalar's requests with the console's key).
    entryPoints: {
      "console/app": path.join(root, "console/src/main.ts"),
      "docs/docs": path.join(root, "console/docs/docs.ts"),
    },
    bundle: true,
    format: "esm",
    platform: "browser",
    target: ["es2022", "chrome120", "firefox128", "safari17"],
    minify: true,
    sourcemap: "linked",
    legalComments: "eof",
    outdir: out,
    write: false,
    logLevel: "warning",
  });
  const copy = (from: string, to: string) => put(to, readFileSync(path.join(root, from)));
  const scalar = createRequire(import.meta.url).resolve("@scalar/api-reference/browser/standalone.js");
  const written = new Set([
    ...bundle.outputFiles.map((file) => put(path.relative(out, file.path), file.contents)),
    copy("console/index.html", "console/index.html"),
    // The style in parts (each file small enough to read), served as one file.
    put("console/console.css", STYLES.map((file) => readFileSync(path.join(root, file), "utf8")).join("\n")),
    copy("console/headers", "_headers"),
    copy("console/docs/index.html", "docs/index.html"),
    put("docs/scalar.js", readFileSync(scalar)),
    // Files of the build itself, not to be served (wrangler reads .assetsignore in the assets folder).
    put(".assetsignore", ".build-stamp\n"),
  ]);
  removeStale(new Set([...written, stampFile]));
  put(".build-stamp", digest);
  return { built: true, ...measure() };
}

/** `1234` bytes as `1.2 KiB`. */
export function kib(bytes: number): string {
  return `${(bytes / 1024).toFixed(1)} KiB`;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const result = await buildConsole({ force: process.argv.includes("--force") });
  console.log(
    `console: ${result.built ? "built" : "up to date"} in dist/ (${kib(result.bytes)}, ${kib(result.gzipBytes)} gzipped)`,
  );
}
