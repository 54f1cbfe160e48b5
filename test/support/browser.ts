import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium, type BrowserContext, type Page } from "playwright-core";

/** Debian's chromium (infra/preflight.ts installs it before `npm test`); playwright-core never downloads a browser. */
export const CHROMIUM = "/usr/bin/chromium";

/** Where browser tests leave their screenshots (gitignored). */
export const ARTIFACTS = path.resolve(import.meta.dirname, "../../test-artifacts");

/**
 * Flags for a headless chromium on a test machine: no sandbox (containers, root), no GPU, and
 * nothing that reaches out to Google's services (the tests run without internet).
 */
const ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** One request as the page sent it. */
export interface SentRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** A browser of a test file's own, with what its pages said that a person would not want to see. */
export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Console errors, uncaught exceptions and failed requests, in the order they came. */
  errors: string[];
  /** Every URL the page asked for. */
  requested: string[];
  /** Everything the page sent, for checking what left the browser. */
  sent: SentRequest[];
  close(): Promise<void>;
}

/** Launches chromium with a fresh profile (its own user-data-dir, removed by `close`) and one page. */
export async function openBrowser(): Promise<TestBrowser> {
  const profile = mkdtempSync(path.join(tmpdir(), "fc-chromium-"));
  mkdirSync(ARTIFACTS, { recursive: true });
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 900 },
    timezoneId: "Europe/Berlin",
    locale: "en-GB",
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  const requested: string[] = [];
  const sent: SentRequest[] = [];
  page.on("console", (message) => {
    if (message.type() === "error") errors.push(`console: ${message.text()}`);
  });
  page.on("pageerror", (error) => errors.push(`uncaught: ${error.message}`));
  page.on("requestfailed", (request) => {
    // A stream the page closed on purpose (leaving a page) is aborted: that is no failure.
    if (request.failure()?.errorText !== "net::ERR_ABORTED") errors.push(`request failed: ${request.url()}`);
  });
  page.on("request", (request) => {
    requested.push(request.url());
    sent.push({
      method: request.method(),
      url: request.url(),
      headers: request.headers(),
      body: request.postData() ?? "",
    });
  });
  return {
    context,
    page,
    errors,
    requested,
    sent,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
