import { z } from "zod";
import { Address, Id, PublicKey } from "./common.js";
import { ActorIds } from "./context.js";
import { MessageFormatType } from "./enums.js";
import { DeliveriesPerPost, Runner } from "./runner.js";

/**
 * Request bodies of the API, shared by the Worker (which validates them), the typed client and
 * the CLI. Ids in paths name what is acted on; bodies never carry a context or owner id.
 */

/** `POST /v1/actors`: the key must sign the request itself (`keyid="key:<pubkey>"`). */
export const ActorRegistration = z
  .object({
    id: Id.optional(),
    pubkey: PublicKey,
    address: z.array(Address).max(16).default([]),
  })
  .strict()
  .meta({ id: "ActorRegistration" });

/** `PATCH /v1/actors/{id}`: an actor changes its own addresses. */
export const ActorUpdate = z
  .object({ address: z.array(Address).max(16) })
  .strict()
  .meta({ id: "ActorUpdate" });

/** `PUT /v1/actors/{id}/key`: signed by the current key, countersigned (`new-key`) by the new one. */
export const KeyRotation = z.object({ pubkey: PublicKey }).strict().meta({ id: "KeyRotation" });

/** `POST /v1/contexts`: the creator always becomes an admin. */
export const ContextCreation = z
  .object({
    id: Id.optional(),
    admins: ActorIds.default([]),
    readers: ActorIds.default([]),
    executors: ActorIds.default([]),
  })
  .strict()
  .meta({ id: "ContextCreation" });

/** `PUT /v1/contexts/{id}/permissions`: replaces all three lists; at least one admin must remain. */
export const PermissionsUpdate = z
  .object({ admins: ActorIds.min(1, "a context needs at least one admin"), readers: ActorIds, executors: ActorIds })
  .strict()
  .meta({ id: "PermissionsUpdate" });

/** `POST /v1/contexts/{id}/runners`. */
export const RunnerRegistration = z
  .object({
    id: Id.optional(),
    pubkey: PublicKey,
    address: Runner.shape.address.default(""),
    topic: Runner.shape.topic.optional(),
    local: Runner.shape.local.optional(),
    runner_type: Runner.shape.runner_type,
    script_types: Runner.shape.script_types.optional(),
    concurrency: Runner.shape.concurrency.default(1),
    deliveries_per_post: DeliveriesPerPost.default(1),
  })
  .strict()
  .meta({ id: "RunnerRegistration" });

/** `PATCH /v1/contexts/{id}/runners/{id}`. */
export const RunnerUpdate = z
  .object({
    pubkey: PublicKey.optional(),
    address: Runner.shape.address.optional(),
    topic: Runner.shape.topic.optional(),
    local: Runner.shape.local.optional(),
    script_types: Runner.shape.script_types.optional(),
    concurrency: Runner.shape.concurrency.optional(),
    deliveries_per_post: DeliveriesPerPost.optional(),
  })
  .strict()
  .meta({ id: "RunnerUpdate" });

export type ActorRegistration = z.input<typeof ActorRegistration>;
export type ActorUpdate = z.input<typeof ActorUpdate>;
export type ContextCreation = z.input<typeof ContextCreation>;
export type PermissionsUpdate = z.input<typeof PermissionsUpdate>;
export type RunnerRegistration = z.input<typeof RunnerRegistration>;
export type RunnerUpdate = z.input<typeof RunnerUpdate>;

/** `POST /v1/contexts/{id}/messages`: a chat line or a mail to another member of the context. */
export const MessageSubmission = z
  .object({
    to: Id,
    message_type: z.enum(["chat", "mail"]).default("chat"),
    message_format_type: MessageFormatType.default("text"),
    subject: z.string().max(256).optional(),
    message: z.string().min(1).max(65_536),
  })
  .strict()
  .meta({ id: "MessageSubmission" });
export type MessageSubmission = z.input<typeof MessageSubmission>;
