import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { PROBLEMS, problemTable } from "../../functions/core/problems.js";

// The problem catalog is published twice (docs/api.md, OpenAPI): both come from PROBLEMS.

describe("the problem catalog", () => {
  it("is in docs/api.md as it is in the code", () => {
    const api = readFileSync(path.resolve(import.meta.dirname, "../../docs/api.md"), "utf8");
    expect(api).toContain(problemTable());
  });

  it("gives every kind a client-error or server-error status, a title and a meaning", () => {
    for (const [kind, p] of Object.entries(PROBLEMS)) {
      expect(p.status, kind).toBeGreaterThanOrEqual(400);
      expect(p.title.length, kind).toBeGreaterThan(0);
      expect(p.meaning, kind).toMatch(/\.$/);
    }
  });
});
