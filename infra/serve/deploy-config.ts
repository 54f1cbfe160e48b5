import path from "node:path";
import { unstable_readConfig } from "wrangler";

/**
 * What `npm run serve` takes from a wrangler.toml: exactly what `wrangler deploy` would deploy,
 * read with wrangler's own reader, so the two never disagree on what the file says.
 */
export interface DeploySettings {
  /** The Worker's name (it prefixes the Durable Object namespaces' unique keys). */
  name: string;
  /** The wrangler.toml read. */
  configPath: string;
  compatibilityDate: string;
  compatibilityFlags: string[];
  /** `[vars]`, as text (a JSON var is written as its JSON). */
  vars: Record<string, string>;
  /** Durable Object bindings and whether each class keeps SQLite storage (its migration says). */
  durableObjects: { binding: string; className: string; sql: boolean }[];
  /** `[assets]`, when the Worker has static assets. */
  assets?: { directory: string; runWorkerFirst: string[] };
  /** `[triggers] crons`. */
  crons: string[];
}

/**
 * Bindings a Worker may have that serve cannot give it on plain workerd: a wrangler.toml that
 * uses one is refused by name rather than run with the binding missing.
 */
const UNSUPPORTED = [
  "kv_namespaces",
  "r2_buckets",
  "d1_databases",
  "services",
  "queues",
  "workflows",
  "send_email",
  "vectorize",
  "hyperdrive",
  "analytics_engine_datasets",
  "dispatch_namespaces",
  "mtls_certificates",
  "browser",
  "ai",
  "images",
  "version_metadata",
  "pipelines",
  "secrets_store_secrets",
  "ratelimits",
  "worker_loaders",
  "unsafe",
  "logfwdr",
  "wasm_modules",
  "text_blobs",
  "data_blobs",
  "site",
  "containers",
  "tail_consumers",
  "streaming_tail_consumers",
] as const;

/** Whether a config value sets anything: a non-empty list, an object with a used field, a scalar. */
function used(value: unknown): boolean {
  if (Array.isArray(value)) return value.length > 0;
  if (value && typeof value === "object") return Object.values(value).some(used);
  return value !== undefined && value !== null;
}

/** Reads and checks the wrangler.toml at `configPath`; throws, naming the setting, on what serve cannot run. */
export function readDeploySettings(configPath: string): DeploySettings {
  const config = unstable_readConfig({ config: configPath });
  const problems = UNSUPPORTED.filter((key) => used((config as Record<string, unknown>)[key])).map(
    (key) => `${key} (a binding plain workerd cannot provide here)`,
  );
  if (!config.compatibility_date) problems.push("compatibility_date (workerd needs one)");
  const sqlClasses = new Map<string, boolean>();
  for (const migration of config.migrations) {
    for (const c of migration.new_sqlite_classes ?? []) sqlClasses.set(c, true);
    for (const c of migration.new_classes ?? []) sqlClasses.set(c, false);
    if (used(migration.renamed_classes) || used(migration.deleted_classes) || used(migration.transferred_classes))
      problems.push(`migration ${migration.tag} renames, deletes or transfers classes (move their storage by hand)`);
  }
  const durableObjects = config.durable_objects.bindings.map(
    (b: { name: string; class_name: string; script_name?: string }) => {
      if (b.script_name) problems.push(`Durable Object ${b.name} lives in another script (${b.script_name})`);
      return { binding: b.name, className: b.class_name, sql: sqlClasses.get(b.class_name) ?? false };
    },
  );
  const assets = config.assets;
  if (assets) {
    if ((assets.html_handling ?? "auto-trailing-slash") !== "auto-trailing-slash")
      problems.push(`assets.html_handling = "${assets.html_handling}" (serve implements "auto-trailing-slash")`);
    if ((assets.not_found_handling ?? "none") !== "none")
      problems.push(`assets.not_found_handling = "${assets.not_found_handling}" (serve implements "none")`);
    if (assets.binding) problems.push(`assets.binding (serve gives the Worker no binding of its assets)`);
  }
  if (problems.length) throw new Error(`serve cannot run ${configPath} as it is:\n  ${problems.join("\n  ")}`);
  const runWorkerFirst = assets?.run_worker_first;
  return {
    name: config.name ?? path.basename(path.dirname(path.resolve(configPath))),
    configPath,
    compatibilityDate: config.compatibility_date ?? "",
    compatibilityFlags: config.compatibility_flags,
    vars: Object.fromEntries(
      Object.entries(config.vars).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]),
    ),
    durableObjects,
    ...(assets?.directory
      ? {
          assets: {
            directory: path.resolve(path.dirname(path.resolve(configPath)), assets.directory),
            runWorkerFirst: runWorkerFirst === true ? ["/*"] : Array.isArray(runWorkerFirst) ? runWorkerFirst : [],
          },
        }
      : {}),
    crons: config.triggers.crons ?? [],
  };
}
