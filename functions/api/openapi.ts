import type { OpenAPIHono } from "@hono/zod-openapi";
import { problemTable } from "../core/problems.js";
import type { AppEnv } from "./app-env.js";
import { withSchemaTypes } from "./openapi-types.js";

/**
 * What the API reference (`/docs/`) opens on: what the API is, how a request is signed, how to
 * call it, then the problem types. Scalar renders each `##` heading as a section of the page's
 * introduction, so the reader meets the signing rules before the table of problems.
 */
const INTRODUCTION = `Flows — DAGs of jobs — are submitted into **contexts** (tenants); the coordinator dispatches
each job whose dependencies have finished to an external **runner**, takes the runner's answers over
signed webhooks and reports the flow's end back. Every answer is JSON; every error an RFC 9457 problem
document (its types are listed [below](#description/problems)).

## Signing requests

Every \`/v1\` route is signed with an **RFC 9421 HTTP Message Signature**, Ed25519. The signature's
label is \`sig1\`, covering \`("@method" "@target-uri" "content-digest")\` (\`content-digest\` only with
a body: RFC 9530, \`sha-256\`), with the parameters \`created\`, \`keyid\`, a fresh \`nonce\` (a nonce is
good once) and \`alg="ed25519"\`. The \`keyid\` says who signs:

| keyid | who |
|---|---|
| \`actor:<id>\` | a registered actor (a person, a program): most routes |
| \`runner:<context>:<id>\` | a registered runner: its webhooks and reports |
| \`key:<pubkey>\` | a key not yet registered: only \`POST /v1/actors\`, which registers it (proof of possession) |

A request the coordinator cannot verify is answered 401 with an \`Accept-Signature\` header saying
what to sign. \`/health\`, \`/openapi.json\`, \`/openrpc.json\` and \`/.well-known/…\` need no signature.

## Calling the API

Signing is done for you by:

- **flowc**, the command line: \`flowc keygen --out key.json\`, \`flowc init --url <this coordinator>
  --key-file key.json\`, \`flowc actor register\`, then \`flowc context create\`, \`flowc flow submit …\`;
  \`--json\` prints the raw answers of these routes.
- **the typed client** (\`shared/client\`): \`new CoordinatorClient({ baseUrl, signer: await
  signerFromJwk(jwk, "actor:<id>") })\`, one method per route.
- **JSON-RPC** at \`/rpc\` (its methods in \`/openrpc.json\`), signed the same way, or as a WebSocket
  session.
- **the web console** at [/console/](/console/), which signs in the browser with your key file.

**Test Request** on this page signs each request with the key the web console holds in this
browser: sign in at [/console/](/console/) first (the key never leaves the browser). Without it,
requests go unsigned and are answered 401.

## Problems

Errors are RFC 9457 problem documents; their types:

`;

/**
 * The OpenAPI 3.1 document of the app's routes: the introduction above, every schema with a
 * `type` (openapi-types.ts: what Scalar needs to render it without warnings).
 */
export function openApiDocument(app: OpenAPIHono<AppEnv>) {
  return withSchemaTypes(
    app.getOpenAPI31Document({
      openapi: "3.1.0",
      info: {
        title: "Flow coordinator",
        version: "0.1.0",
        description: `${INTRODUCTION}${problemTable()}`,
      },
    }),
  );
}
