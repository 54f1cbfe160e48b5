import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { build } from "esbuild";
import type { DeploySettings } from "./deploy-config.js";
import { parseHeaders, type AssetManifest, type FrontRouting } from "./front/routing.js";

/**
 * The files of a bundle folder (`<data>/bundle`), as the workerd config names them. The Worker's
 * script is what `wrangler deploy --dry-run --outdir` writes: the very bundle `wrangler deploy`
 * would upload (wrangler.toml's `[build]`, `[alias]`, `minify` and all).
 */
export const BUNDLE_FILES = {
  worker: "worker/index.js",
  front: "front.js",
  assets: "assets",
  manifest: "manifest.json",
  routing: "routing.json",
} as const;

/** Files of the assets folder that are never served, as wrangler leaves them out of an upload. */
const NEVER_SERVED = new Set(["_headers", "_redirects", "_routes.json", "_worker.js", ".assetsignore"]);

/** Content types by extension: what Cloudflare's asset layer sends for the files a console is made of. */
const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".htm": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".txt": "text/plain; charset=utf-8",
  ".xml": "text/xml; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
  ".ico": "image/x-icon",
  ".woff": "font/woff",
  ".woff2": "font/woff2",
  ".wasm": "application/wasm",
};

/**
 * Builds a bundle folder from scratch: the Worker through wrangler (offline: no update check,
 * no metrics, no `Request.cf` download), the front Worker (front/worker.ts) through esbuild,
 * and the assets copied with their manifest. Written beside `outDir` and renamed into place, so
 * a failed build leaves the previous bundle as it was.
 */
export async function buildBundle(
  settings: DeploySettings,
  outDir: string,
  log: (line: string) => void,
): Promise<void> {
  const next = `${outDir}.next`;
  rmSync(next, { recursive: true, force: true });
  mkdirSync(next, { recursive: true });
  await wranglerDryRun(settings.configPath, path.join(next, path.dirname(BUNDLE_FILES.worker)));
  await build({
    entryPoints: [path.join(import.meta.dirname, "front", "worker.ts")],
    bundle: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    external: ["cloudflare:workers"],
    outfile: path.join(next, BUNDLE_FILES.front),
    logLevel: "warning",
  });
  const routing: FrontRouting = { runWorkerFirst: settings.assets?.runWorkerFirst ?? [], headers: [] };
  let manifest: AssetManifest = {};
  // The config names the folder whether or not the Worker has assets: an empty one serves nothing.
  mkdirSync(path.join(next, BUNDLE_FILES.assets));
  if (settings.assets) {
    manifest = copyAssets(settings.assets.directory, path.join(next, BUNDLE_FILES.assets));
    const headersFile = path.join(settings.assets.directory, "_headers");
    if (existsSync(headersFile)) routing.headers = parseHeaders(readFileSync(headersFile, "utf8"));
    if (existsSync(path.join(settings.assets.directory, "_redirects")))
      throw new Error(`${settings.assets.directory}/_redirects: serve does not implement redirect rules`);
  }
  writeFileSync(path.join(next, BUNDLE_FILES.manifest), JSON.stringify(manifest));
  writeFileSync(path.join(next, BUNDLE_FILES.routing), JSON.stringify(routing));
  rmSync(outDir, { recursive: true, force: true });
  renameSync(next, outDir);
  log(`bundle        ${path.join(outDir, BUNDLE_FILES.worker)}  (wrangler deploy --dry-run: what deploy uploads)`);
}

/** `wrangler deploy --dry-run --outdir <dir>`: wrangler's own build of the Worker, nothing uploaded. */
async function wranglerDryRun(configPath: string, outDir: string): Promise<void> {
  const wrangler = path.join(
    path.dirname(createRequire(import.meta.url).resolve("wrangler/package.json")),
    "bin",
    "wrangler.js",
  );
  const args = [wrangler, "deploy", "--dry-run", "--outdir", outDir, "--config", configPath];
  const child = spawn(process.execPath, args, {
    cwd: path.dirname(configPath),
    env: {
      ...process.env,
      CLOUDFLARE_CF_FETCH_ENABLED: "false",
      WRANGLER_SEND_METRICS: "false",
      // The banner is what asks the registry for a newer wrangler.
      WRANGLER_HIDE_BANNER: "true",
      NO_COLOR: "1",
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const keep = (chunk: Buffer) => (output = (output + chunk.toString()).slice(-8000));
  child.stdout.on("data", keep);
  child.stderr.on("data", keep);
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`wrangler deploy --dry-run failed (exit ${code}):\n${output}`);
  // One module, named after wrangler.toml's `main`: the config names it index.js.
  const modules = readdirSync(outDir).filter((f) => !f.endsWith(".map") && f !== "README.md");
  if (modules.length !== 1 || !modules[0]?.endsWith(".js"))
    throw new Error(`wrangler built ${modules.join(", ") || "nothing"}: serve embeds exactly one module`);
  if (modules[0] !== "index.js") renameSync(path.join(outDir, modules[0]), path.join(outDir, "index.js"));
}

/** The names an `.assetsignore` lists: plain names and paths only (no patterns), or it throws. */
function ignoredNames(assetsDir: string): Set<string> {
  const file = path.join(assetsDir, ".assetsignore");
  if (!existsSync(file)) return new Set();
  const names = readFileSync(file, "utf8")
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line && !line.startsWith("#"));
  const pattern = names.find((name) => /[*?[\]!]/.test(name));
  if (pattern) throw new Error(`${file}: serve reads plain names only, not the pattern "${pattern}"`);
  return new Set(names.map((name) => name.replace(/^\//, "")));
}

/** Copies the served files of `from` into `to` and returns their manifest (ETag: a digest of the bytes). */
function copyAssets(from: string, to: string): AssetManifest {
  const ignored = ignoredNames(from);
  const manifest: AssetManifest = {};
  for (const entry of readdirSync(from, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const relative = path.relative(from, path.join(entry.parentPath, entry.name)).split(path.sep).join("/");
    if (NEVER_SERVED.has(relative) || ignored.has(relative) || ignored.has(entry.name)) continue;
    const content = readFileSync(path.join(from, relative));
    mkdirSync(path.dirname(path.join(to, relative)), { recursive: true });
    writeFileSync(path.join(to, relative), content);
    manifest[`/${relative}`] = {
      etag: createHash("sha256").update(content).digest("hex").slice(0, 32),
      type: TYPES[path.extname(relative).toLowerCase()] ?? "application/octet-stream",
    };
  }
  return manifest;
}
