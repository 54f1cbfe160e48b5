import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const requireHere = createRequire(import.meta.url);

/**
 * Bundles the Worker as `wrangler deploy` does (`--dry-run --outdir`), with `extra` flags
 * (`--minify=false`, `--metafile …`); returns the script's path. Shared by `npm run size` and
 * `npm run size:modules`, which measure what `wrangler deploy` would upload.
 */
export async function buildWorker(outdir: string, extra: string[] = []): Promise<string> {
  const wrangler = path.join(path.dirname(requireHere.resolve("wrangler/package.json")), "bin", "wrangler.js");
  const child = spawn(process.execPath, [wrangler, "deploy", "--dry-run", "--outdir", outdir, ...extra], {
    cwd: root,
    env: { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", NO_COLOR: "1" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (d: Buffer) => (output += d.toString()));
  child.stderr.on("data", (d: Buffer) => (output += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  if (code !== 0) throw new Error(`wrangler deploy --dry-run failed (${code}):\n${output}`);
  return path.join(outdir, "index.js");
}
