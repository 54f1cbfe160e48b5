export * from "./enums.js";
export * from "./common.js";
export { SIZE_LIMITS, formatBytes, jsonBytes, utf8Bytes } from "./limits.js";
export { Actor, WHOAMI_RUNNERS, WhoAmI } from "./actor.js";
export { Context, ContextDetails, ContextLimitsUpdate, FlowStartsPerMinute, MaxInflight } from "./context.js";
export { ContextStored, DeadLettersMax, EffectiveRetention, RetentionPolicy, RetentionUpdate } from "./retention.js";
export {
  Flow,
  FlowErrorInfo,
  FlowLabels,
  FlowName,
  FlowPriority,
  FlowProgress,
  FlowTimeoutsRecord,
  FlowTriggerInfo,
  MaxParallel,
} from "./flow.js";
export {
  FLOW_IDENTITY_LIMITS,
  flowTrigger,
  identityOf,
  labelsText,
  matchesFilters,
  parseLabelFilter,
  triggerText,
  type FlowIdentity,
  type FlowTrigger,
  type LabelFilter,
} from "./flow-identity.js";
export { ChildFlowSpec, FlowParent, MAX_CHILD_DEPTH } from "./child.js";
export {
  EventName,
  JOB_DEFAULTS,
  LONGEST_WAIT,
  MAP_ITEMS_MAX,
  MapSpec,
  Needs,
  RunnerJob,
  scriptTypeOf,
  WaitSpec,
} from "./job.js";
export { FlowResultInfo, Message } from "./message.js";
export { MAX_DELIVERIES_PER_POST, Runner, RunnerDispatch, RunnerWithDispatch, defaultRunnerTopic } from "./runner.js";
export {
  ActorRegistration,
  ActorUpdate,
  ContextCreation,
  KeyRotation,
  MessageSubmission,
  PermissionsUpdate,
  RunnerRegistration,
  RunnerUpdate,
} from "./requests.js";
export { FlowDag, FlowView, JobKind, JobView, JobWaiting } from "./views.js";
export { progressCount } from "./progress.js";
export {
  ADDED_JOBS_MAX,
  CancelPayload,
  DeliveryAnswer,
  DeliveryBatchAnswer,
  DeliveryPayload,
  DeliveryReport,
} from "./delivery.js";
export { DeadLetter } from "./dead-letter.js";
export { AddedJob, ContextStreamEvent, FlowEventType, FlowStreamEvent, StreamTicket } from "./stream.js";
export {
  MAX_INTERVAL_SECONDS,
  RECENT_RUNS,
  Schedule,
  ScheduleCatchup,
  ScheduleOverlap,
  ScheduleRun,
  ScheduleRunOutcome,
  ScheduleSummary,
  ScheduleView,
  isTimeZone,
  scheduleCreation,
  UPCOMING_FIRES,
  type CronCheck,
} from "./schedule.js";
export { EVENT_LIMITS, EventInput, EventLookback, EventSent } from "./event.js";
export {
  FlowOrigin,
  InputDeclaration,
  InputDeclarations,
  InputName,
  InputType,
  InputValues,
  StoredTemplateRef,
  TEMPLATE_LIMITS,
  TemplateName,
  TemplatePut,
  TemplateRef,
  TemplateStart,
  TemplateSummary,
  TemplateVersion,
  TemplateVersionInfo,
  TemplateView,
  inputRequired,
  inputTypeProblem,
  type TemplateStartInput,
} from "./template.js";
