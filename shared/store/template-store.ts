import type { Keys } from "../keys.js";
import {
  TEMPLATE_LIMITS,
  TemplateSummary,
  TemplateVersionInfo,
  type TemplateVersion,
  type TemplateView,
} from "../model/index.js";
import { ConflictError, CorruptRecordError, NotFoundError } from "./errors.js";
import { readIndexPage, toPage, type Page } from "./reads.js";
import { callRedis, type Redis } from "./redis.js";
import type { ScriptReply } from "./script.js";
import { deleteTemplate, putTemplate, readTemplate } from "./scripts/template.js";

/** A version to store: the validated file as JSON, its digest, and what its info says of it. */
export interface NewTemplateVersion {
  contextId: number;
  name: string;
  /** The file as stored, JSON. */
  file: string;
  digest: string;
  creatorId: number;
  /** Epoch seconds. */
  now: number;
  jobs: number;
  inputs: string[];
  description?: string | undefined;
}

/** What a PUT did: a new version, or none (the file was the latest's), and that version's info. */
export interface PutOutcome {
  created: boolean;
  info: TemplateVersionInfo;
}

/** The summary fields readTemplate answers first, in order. */
const SUMMARY = 6;

/**
 * Flow templates (docs/templates.md): one hash per template holding every kept version (its file
 * and its info), an index of names per context, and the version counters in the context's ids.
 * A PUT is one script call, a read of a version (named or the latest) one, a template's versions
 * one; a page of templates two round trips. The reads take a context, a name and a version, as
 * the coordinator's own starts of templates need them.
 */
export class TemplateStore {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Keys,
  ) {}

  /**
   * Stores a new version, unless the file is the latest's (`created: false`, the latest's info).
   * ConflictError when the context holds its most templates; NotFoundError for no context.
   */
  async put(input: NewTemplateVersion): Promise<PutOutcome> {
    const ctx = input.contextId;
    const info = {
      created_at: input.now,
      creator_id: input.creatorId,
      digest: input.digest,
      bytes: new TextEncoder().encode(input.file).length,
      jobs: input.jobs,
      inputs: input.inputs,
      ...(input.description !== undefined ? { description: input.description } : {}),
    };
    const key = this.keys.template(ctx, input.name);
    const reply = (await putTemplate.run(
      this.redis,
      [key, this.keys.templateIndex(ctx), this.keys.ids(ctx), this.keys.context(ctx)],
      [
        input.name,
        this.keys.templateCounter(input.name),
        input.digest,
        input.file,
        JSON.stringify(info),
        input.now,
        TEMPLATE_LIMITS.perContext,
        TEMPLATE_LIMITS.versionsKept,
        input.description ?? "",
      ],
    )) as ScriptReply[];
    const code = Number(reply[0]);
    if (code === -2) throw new NotFoundError("context", String(ctx));
    if (code === -1)
      throw new ConflictError(
        "template",
        input.name,
        `context ${ctx} holds ${TEMPLATE_LIMITS.perContext} templates, the most it may: delete one before adding ${input.name}`,
      );
    const version = Number(reply[1]);
    if (code === 1) return { created: true, info: { version, ...info } };
    return { created: false, info: versionInfo(key, version, String(reply[3])) };
  }

  /**
   * One version of a template with its file, the latest when `version` is not given (one command).
   * NotFoundError for no such template, or a version it does not keep (dropped, or never made).
   */
  async read(contextId: number, name: string, version?: number): Promise<TemplateVersion> {
    const key = this.keys.template(contextId, name);
    const reply = await this.run(key, version === undefined ? "latest" : String(version));
    if (!reply) throw new NotFoundError("template", `${name} in context ${contextId}`);
    const summary = summaryOf(key, reply);
    const [v, info, file] = reply.slice(SUMMARY).map(String) as [string, string, string];
    if (!info || !file) {
      throw new NotFoundError(
        "template version",
        `${v} of ${name} in context ${contextId} (it keeps ${summary.oldest} to ${summary.latest})`,
      );
    }
    return {
      name: summary.name,
      ...versionInfo(key, Number(v), info),
      file: JSON.parse(file) as Record<string, unknown>,
    };
  }

  /** A template with the info of every version it keeps, newest first (one command); null when there is none. */
  async view(contextId: number, name: string): Promise<TemplateView | null> {
    const key = this.keys.template(contextId, name);
    const reply = await this.run(key, "all");
    if (!reply) return null;
    const summary = summaryOf(key, reply);
    const infos = reply.slice(SUMMARY).map(String);
    return {
      ...summary,
      versions: infos.flatMap((info, i) => (info ? [versionInfo(key, summary.latest - i, info)] : [])),
    };
  }

  /** A page of a context's templates by name (two round trips). */
  async list(contextId: number, offset: number, limit: number): Promise<Page<TemplateSummary>> {
    const { members, total } = await readIndexPage(this.redis, this.keys.templateIndex(contextId), offset, limit);
    const keys = members.map((name) => this.keys.template(contextId, name));
    const replies = await callRedis(async () => {
      if (keys.length === 0) return [];
      const p = this.redis.pipeline();
      for (const key of keys) p.hmget(key, "name", "created_at", "updated_at", "latest", "oldest", "description");
      return (await p.exec()) as unknown as (Record<string, unknown> | null)[];
    });
    const items = replies.flatMap((fields, i) => {
      const values = fields ? Object.values(fields) : [];
      return values[0] ? [summaryOf(keys[i] as string, values as ScriptReply[])] : [];
    });
    return toPage(items, offset, members.length, total);
  }

  /** Deletes a template with every version; true when it existed. */
  async remove(contextId: number, name: string): Promise<boolean> {
    const deleted = await deleteTemplate.run(
      this.redis,
      [this.keys.template(contextId, name), this.keys.templateIndex(contextId)],
      [name],
    );
    return Number(deleted) === 1;
  }

  private async run(key: string, which: string): Promise<ScriptReply[] | null> {
    const reply = (await readTemplate.run(this.redis, [key], [which])) as ScriptReply[];
    return reply.length > 0 ? reply : null;
  }
}

/** The summary of readTemplate's first fields (or a HMGET of the same). */
function summaryOf(key: string, reply: ScriptReply[]): TemplateSummary {
  const [name, created, updated, latest, oldest, description] = reply.map((v) => (v === null ? "" : String(v)));
  const parsed = TemplateSummary.safeParse({
    name,
    created_at: Number(created),
    updated_at: Number(updated),
    latest: Number(latest),
    oldest: Number(oldest),
    kept: Number(latest) - Number(oldest) + 1,
    ...(description ? { description } : {}),
  });
  if (!parsed.success) throw corrupt(key, "summary", parsed.error.issues);
  return parsed.data;
}

/** A version's info as stored (JSON without its number) with its number. */
function versionInfo(key: string, version: number, json: string): TemplateVersionInfo {
  let stored: unknown;
  try {
    stored = JSON.parse(json);
  } catch {
    stored = undefined;
  }
  const parsed = TemplateVersionInfo.safeParse({ version, ...(stored as object) });
  if (!parsed.success) throw corrupt(key, `m:${version}`, parsed.error.issues);
  return parsed.data;
}

function corrupt(key: string, field: string, issues: { path: PropertyKey[]; message: string }[]): CorruptRecordError {
  return new CorruptRecordError(
    key,
    issues.map((i) => ({ field: [field, ...i.path.map(String)].join("."), message: i.message })),
  );
}
