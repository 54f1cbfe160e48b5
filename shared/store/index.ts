export { Store, connectStore, epochSeconds } from "./store.js";
export type { StoreLimits } from "./store.js";
export type { RedisConfig } from "./redis.js";
export * from "./errors.js";
export { Repository } from "./repository.js";
export { RunnerKeyTakenError, RunnerStore } from "./runner-store.js";
export { KeyHolders, RUNNERS_NAMED, type KeyHolding } from "./key-holders.js";
export type { CreateInput, Patch, RecordRef } from "./repository.js";
export type { Page } from "./reads.js";
export { codecs } from "./layouts.js";
export { FlowStore, type ClaimsOfCommit, type Creation } from "./flow-store.js";
export { FILTER_WINDOW, type FlowListQuery } from "./flow-list.js";
export { WAITING_NONE, WAITING_SEVERAL } from "./commit-claims.js";
export { pushRunnersOf, type PushRunnerName } from "./push-runners.js";
export type { Claimed, ClaimedRunner, CommitClaim, CommitOutcome } from "./commit-claims.js";
export { CLAIM_LIMIT, DELIVERED_SCORE, DispatchStore } from "./dispatch-store.js";
export type { Claim, ClaimResult, ClaimRunner, Held, RunnerHealth, WorkSettlement } from "./dispatch-store.js";
export { readyQueueOf, serves } from "./ready-queue.js";
export type { ReadyQueue } from "./ready-queue.js";
export type {
  FreshReservation,
  RecordToken,
  Reservation,
  ReservedIds,
  ReserveRequest,
  Settlement,
  StoredFlow,
} from "./flow-store.js";
export { deadlineOwner, planCommit } from "./flow-plan.js";
export type { CommitPlan, CommitStep, PlanCall } from "./flow-plan.js";
export { CALL_BYTES, callBytes } from "./commit-calls.js";
export { jobRecord, messageEnd } from "./flow-records.js";
export { MessageStore } from "./message-store.js";
export { DeadLetters } from "./dead-letters.js";
export { DEAD_LETTERS_MAX, DROPPED_FIELD as DEAD_LETTERS_DROPPED_FIELD } from "./scripts/dead-letter-cap.js";
export type { ContextLook, SweepEnd, SweepPolicy } from "./sweep-store.js";
export { FOLD_LIMIT, MetricsStore, SCRAPE_CONTEXT_LIMIT } from "./metrics-store.js";
export type { ContextFigures, Counters, Scrape, SweepCounts } from "./metrics-store.js";
export { KeyEpoch, type EpochReading } from "./key-epoch.js";
export { ScheduleStore } from "./schedule-store.js";
export type { NewSchedule, SchedulePatch, StoredSchedule } from "./schedule-store.js";
export { RetentionStore } from "./retention-store.js";
export type { PurgeOutcome, PurgeTarget } from "./retention-store.js";
export { TemplateStore } from "./template-store.js";
export type { NewTemplateVersion, PutOutcome } from "./template-store.js";
