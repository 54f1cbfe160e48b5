/**
 * How `npm run serve` routes a request between the static assets and the Worker: the part of
 * Cloudflare's asset routing that wrangler.toml's `[assets]` asks for, ported from the asset
 * worker wrangler itself runs (workers-shared, as bundled with wrangler 4.155): `html_handling =
 * "auto-trailing-slash"`, `not_found_handling = "none"`, `run_worker_first` patterns, and the
 * `_headers` file's rules. Pure (no Workers API): the front Worker (worker.ts) and the unit tests
 * share it, and test/e2e/serve.test.ts holds it to what `wrangler dev` answers.
 */

/** An asset as the front Worker knows it: its ETag (a digest of its bytes) and its content type. */
export interface AssetEntry {
  etag: string;
  type: string;
}

/** Every asset by its path (`/console/app.js`). */
export type AssetManifest = Record<string, AssetEntry>;

/** What to do with a request's path: serve an asset, redirect, or hand it to the Worker. */
export type Intent = { serve: string } | { redirect: string } | null;

/** One `_headers` rule: the path pattern and the headers it sets or removes. */
export interface HeaderRule {
  pattern: string;
  set: [string, string][];
  unset: string[];
}

/** Everything the front Worker needs besides the assets themselves (a JSON binding). */
export interface FrontRouting {
  /** `run_worker_first`: patterns whose requests go straight to the Worker. */
  runWorkerFirst: string[];
  headers: HeaderRule[];
}

/** A percent-decoded path with runs of slashes folded, as the asset worker reads paths. */
export function decodePath(pathname: string): string {
  return pathname
    .split("/")
    .map((part) => {
      try {
        return decodeURIComponent(part);
      } catch {
        return part;
      }
    })
    .join("/")
    .replace(/\/+/g, "/");
}

/** The canonical encoded form of a decoded path (what a request is redirected to when it differs). */
export function encodePath(pathname: string): string {
  return pathname
    .split("/")
    .map((part) => encodeURIComponent(part))
    .join("/");
}

/**
 * The asset (or the redirect) a decoded path resolves to under `auto-trailing-slash`: `x/` serves
 * `x/index.html`, `x` serves `x.html`, and the other spellings of the same page redirect to
 * those. null: no asset, so the Worker answers (`not_found_handling = "none"`).
 */
export function intentFor(pathname: string, assets: AssetManifest, skipRedirects = false): Intent {
  const exists = (p: string) => assets[p] !== undefined;
  const redirect = (file: string, destination: string): Intent => {
    if (skipRedirects || exists(destination)) return null;
    // Only when the destination would serve the very same file.
    const intent = intentFor(destination, assets, true);
    return intent && "serve" in intent && assets[intent.serve]?.etag === assets[file]?.etag
      ? { redirect: destination }
      : null;
  };
  let found: Intent;
  if (pathname.endsWith("/index")) {
    if (exists(pathname)) return { serve: pathname };
    found =
      redirect(`${pathname}.html`, pathname.slice(0, -5)) ??
      redirect(`${pathname.slice(0, -6)}.html`, pathname.slice(0, -6));
  } else if (pathname.endsWith("/index.html")) {
    found =
      redirect(pathname, pathname.slice(0, -10)) ?? redirect(`${pathname.slice(0, -11)}.html`, pathname.slice(0, -11));
  } else if (pathname.endsWith("/")) {
    if (exists(`${pathname}index.html`)) return { serve: `${pathname}index.html` };
    found = redirect(`${pathname.slice(0, -1)}.html`, pathname.slice(0, -1));
  } else if (pathname.endsWith(".html")) {
    found =
      redirect(pathname, pathname.slice(0, -5)) ??
      redirect(`${pathname.slice(0, -5)}/index.html`, `${pathname.slice(0, -5)}/`);
  } else found = null;
  if (found) return found;
  if (exists(pathname)) return { serve: pathname };
  if (exists(`${pathname}.html`)) return { serve: `${pathname}.html` };
  return redirect(`${pathname}/index.html`, `${pathname}/`);
}

const ESCAPE = /[-/\\^$*+?.()|[\]{}]/g;

/** A rule's pattern as the asset worker compiles it: `*` a splat, `:name` one segment. */
export function ruleRegExp(pattern: string): RegExp {
  let source = pattern
    .split("*")
    .map((part) => part.replace(ESCAPE, "\\$&"))
    .join("(?<splat>.*)");
  for (const match of source.matchAll(/:([A-Za-z]\w*)/g))
    source = source.split(match[0]).join(`(?<${match[1] as string}>[^/]+)`);
  return new RegExp(`^${source}$`);
}

/** Whether a (raw) path is one `run_worker_first` sends straight to the Worker; `!` patterns exclude. */
export function workerFirst(patterns: string[], pathname: string): boolean {
  const matches = (p: string) => ruleRegExp(p).test(pathname);
  const excluded = patterns.filter((p) => p.startsWith("!")).some((p) => matches(p.slice(1)));
  return !excluded && patterns.filter((p) => !p.startsWith("!")).some(matches);
}

/**
 * Parses a `_headers` file: a path pattern on a line of its own, then indented `Name: value`
 * lines (`! Name` removes a header). Throws on what it does not understand, naming the line.
 */
export function parseHeaders(text: string): HeaderRule[] {
  const rules: HeaderRule[] = [];
  let rule: HeaderRule | undefined;
  text.split("\n").forEach((raw, index) => {
    const line = raw.trim();
    if (!line || line.startsWith("#")) return;
    if (!/^\s/.test(raw)) {
      if (!line.startsWith("/")) throw new Error(`_headers line ${index + 1}: a path must start with "/": ${line}`);
      rule = { pattern: line, set: [], unset: [] };
      rules.push(rule);
      return;
    }
    if (!rule) throw new Error(`_headers line ${index + 1}: a header before any path`);
    if (line.startsWith("!")) {
      rule.unset.push(line.slice(1).trim());
      return;
    }
    const colon = line.indexOf(":");
    if (colon <= 0) throw new Error(`_headers line ${index + 1}: expected "Name: value": ${line}`);
    rule.set.push([line.slice(0, colon).trim(), line.slice(colon + 1).trim()]);
  });
  return rules;
}

/**
 * Applies the `_headers` rules matching `pathname` to `headers`, in file order: a header a rule
 * sets replaces the response's own, a second rule setting it again appends.
 */
export function applyHeaderRules(rules: HeaderRule[], pathname: string, headers: Headers): void {
  const setHere = new Set<string>();
  for (const rule of rules) {
    const match = ruleRegExp(rule.pattern).exec(pathname);
    if (!match) continue;
    for (const name of rule.unset) headers.delete(name);
    for (const [name, template] of rule.set) {
      let value = template;
      for (const [key, part] of Object.entries(match.groups ?? {})) value = value.replaceAll(`:${key}`, part ?? "");
      if (setHere.has(name.toLowerCase())) headers.append(name, value);
      else {
        headers.set(name, value);
        setHere.add(name.toLowerCase());
      }
    }
  }
}
