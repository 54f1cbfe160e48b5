import { z } from "zod";
import { ContextDetails, Id, RetentionUpdate } from "../../shared/model/index.js";
import { deleteContext, deleteFlow, setRetention } from "../service/retention.js";
import { lazyTable, method } from "./rpc-method.js";

/** JSON-RPC methods of the data lifecycle: retention, and deleting flows and contexts; built on first use. */
export const lifecycleMethods = lazyTable(() => ({
  "context.retention": method({
    summary:
      "Set a context's retention (admins): finished_seconds, error_seconds, inbox_seconds, dead_letters; a number sets a part, null goes back to the default, an absent one stays",
    params: RetentionUpdate.extend({ id: Id }).strict().meta({ id: "RetentionParams" }),
    result: ContextDetails,
    run: (call, { id, ...update }) => setRetention(call, id, update),
  }),
  "context.delete": method({
    summary:
      "Delete a context with everything in it (admins): gone for every caller at once, removed in bounded steps; deleted false means the sweep carries the rest on (call again to go on with it)",
    params: z.object({ id: Id }).strict(),
    result: z.object({ deleted: z.boolean() }).strict(),
    run: async (call, p) => ({ deleted: await deleteContext(call, p.id) }),
  }),
  "flow.delete": method({
    summary:
      "Delete an ended flow now with everything it owns and its child flows (admins); one still running, or whose child still runs, is a conflict naming its status",
    params: z.object({ context_id: Id, id: Id }).strict(),
    result: z.object({ deleted: z.literal(true) }).strict(),
    alsoFails: [409],
    run: async (call, p) => {
      await deleteFlow(call, p.context_id, p.id);
      return { deleted: true as const };
    },
  }),
}));
