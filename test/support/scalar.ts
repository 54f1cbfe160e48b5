import { createWorkspaceStore } from "@scalar/workspace-store/client";
import { vi } from "vitest";

// Scalar's own document pipeline in Node: the workspace store @scalar/api-reference bundles (the
// same version, a dependency of it), which loads a document as the page at /docs/ does and logs
// what its TypeBox model of OpenAPI refuses.

/** What Scalar's store warns about a document: the paths of the schemas it refuses. */
export async function scalarWarnings(document: object): Promise<string[]> {
  const refused: string[] = [];
  const warn = vi.spyOn(console, "warn").mockImplementation((...args: unknown[]) => {
    const [first] = args;
    if (Array.isArray(first))
      refused.push(...first.map((e: { path: string; message: string }) => `${e.path}: ${e.message}`));
    else refused.push(String(first));
  });
  // The store times its steps on console.info.
  const info = vi.spyOn(console, "info").mockImplementation(() => undefined);
  try {
    await createWorkspaceStore().addDocument({ name: "api", document: structuredClone(document) as never });
  } finally {
    warn.mockRestore();
    info.mockRestore();
  }
  return refused;
}
