import type { CoordinatorClient } from "../../shared/client/index.js";
import type { FlowView } from "../../shared/model/index.js";
import type { PrivateStack } from "../support/private-stack.js";

/** A flow as the API shows it, and what the Worker logged about it: for a flow that did not end. */
export async function describeFlow(
  stack: PrivateStack,
  client: CoordinatorClient,
  ctx: number,
  flowId: number,
): Promise<string> {
  const view = await client.loadFlow(ctx, flowId).catch((error: unknown) => `unreadable: ${(error as Error).message}`);
  const said = stack
    .workerLog()
    .split("\n")
    .filter((l) => l.includes(`flow ${flowId} `))
    .slice(-5);
  if (typeof view === "string") return `flow ${flowId} ${view}`;
  const jobs = view.jobs.map(
    (j) =>
      `${j.key} ${j.status} attempt ${j.attempt}${j.runner_id !== undefined ? ` runner ${j.runner_id} ${j.delivery}` : ""}${j.waiting ? ` (${j.waiting.reason}: ${j.waiting.detail})` : ""}`,
  );
  const stored = await storedJobs(stack, ctx, view);
  return `flow ${flowId} ${view.status}, next deadline ${view.next_deadline ?? "none"} (now ${Math.floor(Date.now() / 1000)}): ${jobs.join(", ")}; in Redis: ${stored}${said.length > 0 ? `; the Worker said: ${said.join(" | ")}` : ""}`;
}

/** What Redis holds of a stuck flow's unended jobs: the job's record and its attempts' messages. */
async function storedJobs(stack: PrivateStack, ctx: number, view: FlowView): Promise<string> {
  const fields = (flat: string[]) =>
    Object.fromEntries(flat.flatMap((v, i) => (i % 2 === 0 ? [[v, flat[i + 1]]] : [])));
  const parts: string[] = [];
  const flow = fields(await stack.redis.exec<string[]>(["HGETALL", stack.keys.flow(ctx, view.id)]));
  parts.push(`flow status ${flow.status} ended_at ${flow.ended_at ?? "-"}`);
  for (const job of view.jobs.filter((j) => j.status !== "finished" && j.status !== "error")) {
    const record = fields(await stack.redis.exec<string[]>(["HGETALL", stack.keys.job(ctx, view.caller_id, job.id)]));
    const base = Number(record.message_base) + Number(record.attempt_floor ?? 0);
    const messages: string[] = [];
    for (let a = 0; a <= Number(record.retries ?? 0); a++) {
      const m = fields(
        await stack.redis.exec<string[]>(["HGETALL", stack.keys.message(ctx, view.caller_id, base + a)]),
      );
      if (m.attempt !== undefined)
        messages.push(
          `#${base + a} attempt ${m.attempt} ${m.status} ended_at ${m.ended_at ?? "-"} runner ${m.runner_id ?? "-"}`,
        );
    }
    // The last attempt's message holds no end of its own: the job's record does.
    parts.push(
      `job ${job.key} ${record.status} attempt ${record.attempt ?? "-"} ended_at ${record.ended_at ?? "-"} runner ${record.last_runner_id ?? "-"} [${messages.join("; ")}]`,
    );
  }
  return parts.join(", ");
}
