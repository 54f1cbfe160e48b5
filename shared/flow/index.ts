export { COMPENSATION_SUFFIX, resolveDag } from "./dag.js";
export { compensations, FLOW_ENDED, isCompensation } from "./compensation.js";
export type { DagIssue, DagJob } from "./dag.js";
export { jobEnvironment } from "./env.js";
export { messagesNeeded, newFlowState } from "./build.js";
export { currentRun, rerunBases, rerunEnv, rerunJobs, rerunRefusal } from "./rerun.js";
export type { RerunAsk } from "./rerun.js";
export { apply, deadlineEvent, dueDeadlines, nearestDeadline, UNALLOCATED } from "./machine.js";
export { reportedEnd } from "./events.js";
export { flowDeadline, waitKeyOf } from "./work.js";
export { JobTable, JobTableDraft, jobTableCounts } from "./job-table.js";
export { changedJobs, ENDED, RETRY_DEFAULTS } from "./draft.js";
export type { FlowEffect, FlowEvent, TransitionOutcome, Transition } from "./machine.js";
export { attemptBlock, flowResult, jobKey, jobKind, messageId, resultMessageId } from "./state.js";
export type { Deadline, Delivery, FlowState, FlowTimeouts, JobSpec, JobState } from "./state.js";
export {
  CompensateInput,
  FLOW_LIMITS,
  FlowJobInput,
  FlowSubmission,
  FlowSubmissionFields,
  MESSAGE_TIMEOUTS,
  MessageTimeouts,
  RerunFields,
  RerunRequest,
  runWithFrom,
  withDeadlineChecks,
} from "./submission.js";
export type { FlowSubmissionInput } from "./submission.js";
export { jobJournalOf, journalOf, rebuildState } from "./rebuild.js";
export type { JobJournal, Journal } from "./rebuild.js";
export { flowFigures, DURATION_BUCKETS, LATENCY_BUCKETS } from "./figures.js";
export type { FlowFigures } from "./figures.js";
export { instantiate, TemplateFile } from "./template-file.js";
export type { InstantiatedFlow, TemplateFileInput } from "./template-file.js";
export {
  inputReferences,
  inputsOfEnv,
  inputText,
  inputVariable,
  resolveInputs,
  rewriteInputs,
  substituteInputs,
  withoutInputs,
} from "./inputs.js";
export type { InputIssue } from "./inputs.js";
export { awaitsInstances, instanceSpecOf, itemVars, mapItemsOf, mapListOf } from "./map.js";
export { addedOf, growthNeeds, growthWanted, parseAddedJobs } from "./growth.js";
export type { GrowthIds } from "./growth.js";
