import { describe, expect, it } from "vitest";
import { PROBLEMS, problemTable } from "../../functions/core/problems.js";
import { testWorker } from "./harness.js";

const w = testWorker("openapi");

describe("GET /openapi.json", () => {
  it("is generated from the routes' schemas", async () => {
    const res = await w.fetch(new Request("http://coordinator.test/openapi.json"));
    expect(res.status).toBe(200);
    const doc = (await res.json()) as {
      openapi: string;
      info: { description: string };
      paths: Record<string, Record<string, unknown>>;
      components: { schemas: Record<string, unknown>; securitySchemes: Record<string, unknown> };
    };
    expect(doc.openapi).toBe("3.1.0");
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining([
        "/health",
        "/.well-known/http-message-signatures-directory",
        "/v1/actors",
        "/v1/actors/{actorId}",
        "/v1/actors/{actorId}/key",
        "/v1/contexts",
        "/v1/contexts/{contextId}",
        "/v1/contexts/{contextId}/permissions",
        "/v1/contexts/{contextId}/permissions/{list}/{actorId}",
        "/v1/contexts/{contextId}/runners",
        "/v1/contexts/{contextId}/runners/{runnerId}",
        "/rpc",
      ]),
    );
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(["Actor", "Context", "Runner", "ActorRegistration", "RunnerRegistration", "Problem"]),
    );
    expect(doc.components.securitySchemes).toHaveProperty("httpSignature");
    expect(doc.paths["/v1/contexts"]).toHaveProperty("post");
    // The problem catalog: every type a Problem may carry, and the table in the description.
    const problem = doc.components.schemas.Problem as { properties: { type: { enum: string[] } } };
    expect(problem.properties.type.enum).toEqual(Object.keys(PROBLEMS).map((k) => `/problems/${k}`));
    expect(doc.info.description).toContain(problemTable());
  });

  it("documents cancel and re-run of flows and of jobs outside flows, with the 409 of a status that refuses them, and a re-run's optional body", async () => {
    const res = await w.fetch(new Request("http://coordinator.test/openapi.json"));
    const doc = (await res.json()) as {
      paths: Record<
        string,
        Record<string, { responses: Record<string, { description: string }>; requestBody?: unknown }>
      >;
    };
    const flows = "/v1/contexts/{contextId}/flows/{flowId}";
    const jobs = "/v1/contexts/{contextId}/jobs/{callerId}/{jobId}";
    for (const path of [`${flows}/cancel`, `${flows}/rerun`, `${jobs}/cancel`, `${jobs}/rerun`]) {
      const post = doc.paths[path]?.post;
      expect(post?.responses["409"]?.description, path).toMatch(/flow_status.*job_status/);
      // A cancel takes a body (its reason), a flow's re-run an optional one (from, env_vars, run).
      expect(post?.requestBody !== undefined, path).toBe(path !== `${jobs}/rerun`);
    }
    const rerunBody = doc.paths[`${flows}/rerun`]?.post?.requestBody as { required?: boolean } | undefined;
    expect(rerunBody?.required).toBe(false);
  });

  it("documents events and the jobs that react: waits, sleeps, when, needs, allow_failure, the skipped status", async () => {
    const res = await w.fetch(new Request("http://coordinator.test/openapi.json"));
    const doc = (await res.json()) as {
      paths: Record<string, Record<string, { responses: Record<string, unknown> }>>;
      components: { schemas: Record<string, { properties?: Record<string, { enum?: string[] }>; enum?: string[] }> };
    };
    const send = doc.paths["/v1/contexts/{contextId}/events"]?.post;
    expect(Object.keys(send?.responses ?? {})).toEqual(expect.arrayContaining(["200", "400", "403", "409"]));
    const schemas = doc.components.schemas;
    expect(Object.keys(schemas.EventInput?.properties ?? {})).toEqual(["id", "name", "key", "data"]);
    expect(Object.keys(schemas.EventSent?.properties ?? {})).toEqual(
      expect.arrayContaining(["id", "duplicate", "matched", "resumed", "more"]),
    );
    const job = JSON.stringify(schemas.FlowSubmission);
    for (const field of ["wait", "sleep", "sleep_until", "when", "needs", "allow_failure", "on_timeout"])
      expect(job, field).toContain(`"${field}"`);
    expect(JSON.stringify(schemas.FlowView)).toContain('"skipped"');
    expect(JSON.stringify(schemas.Flow)).toContain('"run_started_at"');
  });

  it("opens on an introduction (what the API is, how requests are signed, how to call it), the problems after, and types every schema", async () => {
    const res = await w.fetch(new Request("http://coordinator.test/openapi.json"));
    const doc = (await res.json()) as {
      info: { description: string };
      components: { schemas: Record<string, { properties?: Record<string, { type?: unknown }> }> };
    };
    const text = doc.info.description;
    const at = (heading: string) => text.indexOf(`\n## ${heading}\n`);
    expect(text.startsWith("Flows — DAGs of jobs — are submitted into **contexts**")).toBe(true);
    expect(at("Signing requests")).toBeGreaterThan(0);
    expect(at("Calling the API")).toBeGreaterThan(at("Signing requests"));
    expect(at("Problems")).toBeGreaterThan(at("Calling the API"));
    expect(text.indexOf(problemTable())).toBeGreaterThan(at("Problems"));
    expect(text).toContain("signs each request with the key the web console holds");
    // A union zod leaves untyped gets its members' type (what Scalar's checks want: openapi-types.ts).
    expect(doc.components.schemas.Runner?.properties?.address?.type).toBe("string");
  });

  it("publishes the coordinator's key at the well-known URL with its thumbprint as kid", async () => {
    const keys = await w.anonymous.coordinatorKeys();
    expect(keys.keys).toHaveLength(1);
    expect(keys.keys[0]).toMatchObject({ kty: "OKP", crv: "Ed25519", use: "sig", status: "current" });
    expect(keys.keys[0]?.kid).toMatch(/^[A-Za-z0-9_-]{43}$/);
  });
});
