import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

// The README and docs/ point at each other and at the source: every relative link names a file
// that exists, and every #anchor one of the target's headings (as GitHub makes them). The README
// stays small; the reference lives in docs/, and docs/README.md indexes every page there.

const root = path.resolve(import.meta.dirname, "../..");
const docs = readdirSync(path.join(root, "docs"))
  .filter((f) => f.endsWith(".md"))
  .map((f) => `docs/${f}`);
const pages = ["README.md", "examples/README.md", ...docs];
const read = (file: string) => readFileSync(path.join(root, file), "utf8");

/** Text outside fenced code blocks and inline code, where Markdown links are links. */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, "").replace(/`[^`\n]*`/g, "");
}

/** The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as dashes. */
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading = ""] of text.replace(/^```[\s\S]*?^```/gm, "").matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = heading
      .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Every relative link of a page: `[text](target)`, external ones (scheme:) left out. */
function links(text: string): string[] {
  return [...prose(text).matchAll(/\]\(([^)\s]+)\)/g)]
    .map((m) => m[1] ?? "")
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

describe("the README and docs/", () => {
  it.each(pages)("%s links only to files and headings that exist", (page) => {
    const broken: string[] = [];
    for (const target of links(read(page))) {
      const [file = "", anchor] = target.split("#");
      const resolved = file === "" ? page : path.posix.normalize(path.posix.join(path.posix.dirname(page), file));
      if (!existsSync(path.join(root, resolved))) {
        broken.push(`${target}: no file ${resolved}`);
        continue;
      }
      if (anchor !== undefined && resolved.endsWith(".md") && statSync(path.join(root, resolved)).isFile()) {
        if (!anchors(read(resolved)).has(anchor)) broken.push(`${target}: no heading #${anchor} in ${resolved}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it("indexes every page of docs/ in docs/README.md and in the README", () => {
    const index = links(read("docs/README.md")).map((t) => t.split("#")[0]);
    const readme = links(read("README.md")).map((t) => t.split("#")[0]);
    for (const doc of docs.filter((d) => d !== "docs/README.md")) {
      expect(index, doc).toContain(path.posix.basename(doc));
      expect(readme, doc).toContain(doc);
    }
  });

  it("keeps the README short: what it is, the two commands, a first flow, where next", () => {
    expect(read("README.md").trimEnd().split("\n").length).toBeLessThanOrEqual(250);
  });
});
