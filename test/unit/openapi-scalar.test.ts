import { describe, expect, it } from "vitest";
import { withSchemaTypes } from "../../functions/api/openapi-types.js";
import { scalarWarnings } from "../support/scalar.js";

// The API reference at /docs/ is Scalar rendering /openapi.json. Scalar loads a document into its
// workspace store (the version @scalar/api-reference bundles) and checks it against a TypeBox
// model of its own, logging "document validation errors" with "Expected union value" for each
// schema it refuses: the page logged them for Runner, FlowTemplate, RunnerReportAnswer and
// ScheduleSummary, though the document is valid OpenAPI. The same pipeline runs here in Node, on
// small documents; the served document goes through it in test/e2e/console-pages.test.ts.

describe("withSchemaTypes", () => {
  const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
  const doc = (schemas: Record<string, unknown>) => ({
    openapi: "3.1.0",
    info: { title: "t", version: "1" },
    paths: {},
    components: { schemas },
  });

  it("makes Scalar refuse a referenced schema without it, and accept it with it", async () => {
    // A schema reached through a $ref with an untyped part: a union, an enum alone, any value.
    const parts = {
      address: {
        anyOf: [
          { type: "string", format: "uri" },
          { type: "string", enum: [""] },
        ],
      },
      kind: { enum: ["a", 1] },
      anything: { description: "any JSON value" },
      inputs: { type: "object", additionalProperties: {} },
    };
    const raw = doc({
      Holder: { type: "object", properties: { thing: ref("Thing") } },
      Thing: { type: "object", properties: parts },
    });
    expect(await scalarWarnings(raw)).toEqual([
      "document validation errors: ",
      "/components/schemas/Thing: Expected union value",
    ]);
    const typed = withSchemaTypes(structuredClone(raw));
    expect(await scalarWarnings(typed)).toEqual([]);
    const props = (typed.components.schemas.Thing as { properties: Record<string, { type?: unknown }> }).properties;
    expect(props.address?.type).toBe("string");
    expect(props.kind?.type).toEqual(["string", "number"]);
    expect(props.anything?.type).toEqual(["string", "number", "boolean", "object", "array", "null"]);
  });

  it("types a union of references by what they reference, and leaves a cycle alone", () => {
    const typed = withSchemaTypes(
      doc({
        A: { type: "object" },
        B: { anyOf: [ref("A"), { type: "null" }] },
        Loop: { anyOf: [ref("Loop"), { type: "string" }] },
      }),
    );
    expect(typed.components.schemas.B).toMatchObject({ type: ["object", "null"] });
    expect(typed.components.schemas.Loop).not.toHaveProperty("type");
  });

  it("types the schemas of parameters and contents, and leaves examples alone", () => {
    const typed = withSchemaTypes({
      openapi: "3.1.0",
      paths: {
        "/x": {
          get: {
            parameters: [{ name: "q", in: "query", schema: { enum: ["a"] } }],
            responses: {
              200: { content: { "application/json": { schema: {}, example: { schema: {} } } } },
            },
          },
        },
      },
    });
    const get = typed.paths["/x"].get;
    expect(get.parameters[0]?.schema).toEqual({ enum: ["a"], type: "string" });
    const content = get.responses[200].content["application/json"];
    expect(content.schema).toHaveProperty("type");
    expect(content.example).toEqual({ schema: {} });
  });
});
