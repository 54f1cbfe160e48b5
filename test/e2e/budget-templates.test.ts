import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { reserveFlow, createFlow } from "../../shared/store/scripts/flow.js";
import { putTemplate, readTemplate } from "../../shared/store/scripts/template.js";
import { usePrivateStack } from "../support/use-private-stack.js";

// What templates send to storage, counted where it leaves: at this stack's own REST endpoint
// (one EVALSHA is one command, a pipeline of n is n), per request of the Worker, in order. The
// key epoch's read (MGET, at most once a second per isolate, whichever request it precedes) is
// left out, as in budget-sent.test.ts.

// No cron: a sweep in the middle would be counted too.
const { stack, admin } = usePrivateStack("budget-templates", { cron: false });

const sha1 = (text: string) => createHash("sha1").update(text).digest("hex");
const SCRIPTS = new Map(
  [putTemplate, readTemplate, reserveFlow, createFlow].map((script) => [`EVALSHA ${sha1(script.source)}`, script.name]),
);

/** The storage requests `work` makes, each as its commands' names (scripts by name), the key epoch's reads left out. */
async function sentBy(work: () => Promise<unknown>): Promise<string[]> {
  await new Promise((r) => setTimeout(r, 300)); // what the last request left to do (waitUntil) is done
  const stop = stack().restRecord();
  await work();
  await new Promise((r) => setTimeout(r, 300));
  return stop()
    .map((commands) => commands.map((c) => SCRIPTS.get(c) ?? c).join(" + "))
    .filter((request) => request !== "MGET");
}

const file = (text: string) => ({
  inputs: { who: { type: "string" as const, default: "world" } },
  env_vars: { WHO: "${inputs.who}" },
  jobs: [{ name: "hello", script: `echo ${text}`, script_type: "sh" as const }],
});

describe("budget: templates' commands sent to storage", () => {
  it("puts a version with one script call, and reads one (or every version's info) with one, besides the nonce", async () => {
    const client = admin().client;
    const ctx = (await client.createContext()).id;
    // Warm up: the first calls load the scripts and the context into the isolate's cache.
    await client.templates.put(ctx, "warm", file("warm"));
    await client.templates.version(ctx, "warm");
    await client.templates.list(ctx);

    const put = await sentBy(() => client.templates.put(ctx, "hello", file("v1")));
    const same = await sentBy(() => client.templates.put(ctx, "hello", file("v1")));
    const next = await sentBy(() => client.templates.put(ctx, "hello", file("v2")));
    const latest = await sentBy(() => client.templates.version(ctx, "hello"));
    const one = await sentBy(() => client.templates.version(ctx, "hello", 1));
    const versions = await sentBy(() => client.templates.get(ctx, "hello"));
    const list = await sentBy(() => client.templates.list(ctx));
    console.log(
      `budget: template PUT ${JSON.stringify(put)}, again ${JSON.stringify(same)}, GET a version ${JSON.stringify(one)}, the latest ${JSON.stringify(latest)}, all versions ${JSON.stringify(versions)}, a page of 2 ${JSON.stringify(list)}`,
    );
    // The request's nonce (SET NX), then the script: two commands, two round trips.
    for (const requests of [put, same, next]) expect(requests).toEqual(["SET", "putTemplate"]);
    for (const requests of [latest, one, versions]) expect(requests).toEqual(["SET", "readTemplate"]);
    // The nonce, a page of the index with its size, the page's summaries (one HMGET each).
    expect(list).toEqual(["SET", "ZRANGE + ZCARD", "HMGET + HMGET"]);
  });

  it("starts a flow with one command more than the same flow's submission: the version's read", async () => {
    const client = admin().client;
    const ctx = (await client.createContext()).id;
    await client.templates.put(ctx, "hello", file("hi"));
    // Warm up both ways.
    await client.templates.start(ctx, "hello", { start: false });
    const flow = { env_vars: { WHO: "world", INPUT_WHO: "world" }, jobs: file("hi").jobs };
    await client.submitFlow(ctx, flow);

    const submitted = await sentBy(() => client.submitFlow(ctx, flow));
    const started = await sentBy(() => client.templates.start(ctx, "hello", { start: false }));
    console.log(
      `budget: a flow submitted ${JSON.stringify(submitted)}, started from a template ${JSON.stringify(started)}`,
    );
    expect(started).toEqual(["readTemplate", ...submitted]);
  });
});
