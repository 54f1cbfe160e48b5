import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll } from "vitest";
import type { PrivateStackOptions } from "./private-stack.js";
import { openBrowser, type TestBrowser } from "./browser.js";
import { usePrivateStack } from "./use-private-stack.js";

/**
 * What a console test starts with: a private stack and its admin (usePrivateStack), a Chromium of
 * the file's own, and the admin's key in a file the sign-in page is given (`keyFile`), all
 * removed after the file. Registered before the file's own hooks, so a file's afterAll (letting
 * held requests go) runs while the browser is still open.
 */
export function useConsoleBrowser(label: string, options: PrivateStackOptions = {}) {
  const { stack, admin } = usePrivateStack(label, options);
  const tmp = mkdtempSync(path.join(tmpdir(), `fc-${label}-`));
  const keyFile = path.join(tmp, "actor-key.json");
  let opened: TestBrowser | undefined;
  beforeAll(async () => {
    opened = await openBrowser();
    writeFileSync(keyFile, JSON.stringify(admin().jwk), { mode: 0o600 });
  });
  afterAll(async () => {
    await opened?.close();
    rmSync(tmp, { recursive: true, force: true });
  });
  /** The file's browser (open from beforeAll on). */
  const browser = (): TestBrowser => {
    if (!opened) throw new Error("the console's browser is not open yet (it opens in beforeAll)");
    return opened;
  };
  return { stack, admin, keyFile, tmp, browser };
}
