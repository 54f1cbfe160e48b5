import { FlowSubmission, instantiate, resolveDag, TemplateFile, type InputIssue } from "../../shared/flow/index.js";
import type {
  FlowParent,
  FlowView,
  InputValues,
  TemplatePut,
  TemplateStart,
  TemplateSummary,
  TemplateVersion,
  TemplateView,
} from "../../shared/model/index.js";
import type { Page } from "../../shared/store/index.js";
import { fieldProblem } from "../core/errors.js";
import type { SignatureNonce } from "../core/principal.js";
import { Problem } from "../core/problem.js";
import { contextFor, requireActor } from "./access.js";
import type { FlowCall, ServiceCall } from "./call.js";
import { submitFlow } from "./flows.js";
import { checkPinnedRunners, dagProblem, requestDigest } from "./submission.js";

/*
 * Flow templates (docs/templates.md): flow files stored by name as numbered, immutable versions,
 * and flows started from them. Who may do what is what flows ask: admins put, delete and start
 * templates (as they submit flows), readers list and read them.
 */

/**
 * Stores `file` as the next version of template `name` (admins), checked as a submission is (the
 * DAG, pinned runners); a file the same as the latest version's makes none and answers that one
 * (`created: false`), so a PUT repeated after a lost answer makes one version. Costs one script
 * call (and a read of the runners when a job pins one).
 */
export async function putTemplate(
  call: FlowCall,
  contextId: number,
  name: string,
  file: TemplateFile,
): Promise<TemplatePut> {
  const actorId = requireActor(call);
  await contextFor(call, contextId, "admin");
  const check = resolveDag(file.jobs);
  if ("issues" in check) throw dagProblem(check.issues);
  await checkPinnedRunners(call, contextId, file.jobs);
  const stored = JSON.stringify(file);
  const { created, info } = await call.store.templates.put({
    contextId,
    name,
    file: stored,
    digest: await requestDigest(file),
    creatorId: actorId,
    now: Math.floor(Date.now() / 1000),
    jobs: file.jobs.length,
    inputs: Object.keys(file.inputs),
    description: file.description,
  });
  return { name, ...info, created };
}

/** A page of a context's templates by name (readers). */
export async function listTemplates(
  call: ServiceCall,
  contextId: number,
  offset: number,
  limit: number,
): Promise<Page<TemplateSummary>> {
  await contextFor(call, contextId, "read");
  return call.store.templates.list(contextId, offset, limit);
}

/** A template with every version it keeps, newest first (readers). */
export async function loadTemplate(call: ServiceCall, contextId: number, name: string): Promise<TemplateView> {
  await contextFor(call, contextId, "read");
  const view = await call.store.templates.view(contextId, name);
  if (!view) throw new Problem("not-found", `template ${name} does not exist in context ${contextId}`);
  return view;
}

/** One version with its file, the latest when `version` is not given (readers). */
export async function loadTemplateVersion(
  call: ServiceCall,
  contextId: number,
  name: string,
  version?: number,
): Promise<TemplateVersion> {
  await contextFor(call, contextId, "read");
  return call.store.templates.read(contextId, name, version);
}

/**
 * Deletes a template with every version (admins); deleting one that is gone answers the same.
 * Flows started from it and schedules naming it are not touched (a schedule's next fire fails,
 * saying the template is gone). Its version numbers are not given again.
 */
export async function deleteTemplate(call: ServiceCall, contextId: number, name: string): Promise<void> {
  await contextFor(call, contextId, "admin");
  await call.store.templates.remove(contextId, name);
}

/**
 * Starts a flow from a template (admins): the version asked for (default: the latest now), its
 * inputs checked (400 naming `<where>.inputs.<name>`) and put into the flow, which is then
 * submitted as any flow is: the same checks, limits, Idempotency-Key and nonce. `where` names the
 * request's part the inputs came in (`body`, a schedule's `from_template`, a job's `flow`);
 * `parent`, the job that starts it when it is a child flow, and `scheduleId`, the schedule whose
 * fire starts it (both kept on its record). The flow is named after the template unless its file
 * gives a name.
 */
export async function startTemplate(
  call: FlowCall,
  contextId: number,
  name: string,
  start: TemplateStart,
  idempotencyKey: string | undefined,
  nonce?: SignatureNonce,
  where = "body",
  parent?: FlowParent,
  scheduleId?: number,
): Promise<{ view: FlowView; created: boolean }> {
  await contextFor(call, contextId, "admin");
  const version = await call.store.templates.read(contextId, name, start.version);
  const submission = flowOf(version, start.inputs, where);
  const origin = { ref: { name, version: version.version }, request: { template: name, ...start }, parent };
  const flow = { ...submission, name: submission.name ?? name, start: start.start };
  return submitFlow(call, contextId, flow, idempotencyKey, nonce, origin, scheduleId);
}

/**
 * The flow a version makes with `inputs`, checked as a submission: a 400 names the inputs at
 * fault, or says that the version with these inputs is not a valid flow (its env too big, say).
 */
export function flowOf(version: TemplateVersion, inputs: InputValues, where = "body"): FlowSubmission {
  const file = TemplateFile.safeParse(version.file);
  if (!file.success) {
    const first = file.error.issues[0];
    throw new Problem(
      "conflict",
      `version ${version.version} of template ${version.name} no longer passes the checks (${first?.path.join(".")}: ${first?.message}): put a new version`,
    );
  }
  const made = instantiate(file.data, inputs);
  if ("issues" in made) throw inputsProblem(made.issues, where);
  const flow = FlowSubmission.safeParse(made.flow);
  if (flow.success) return flow.data;
  const issues = flow.error.issues.map((i) => ({
    field: `${where}.inputs`,
    message: `with these inputs, version ${version.version} of template ${version.name} is not a valid flow: ${i.path.join(".")}: ${i.message}`,
  }));
  throw fieldProblem(issues);
}

/** The 400 naming each input at fault. */
function inputsProblem(issues: InputIssue[], where: string): Problem {
  return fieldProblem(issues.map((i) => ({ field: `${where}.${i.field}`, message: i.message })));
}
