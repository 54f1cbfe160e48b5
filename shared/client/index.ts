export { CoordinatorClient, signerFromJwk } from "./client.js";
export type { Page } from "../model/index.js";
export type { ClientOptions, Countersigner, Fetcher, PageQuery, RequestExtras, RpcErrorObject } from "./client.js";
export { ApiError, parseAnswerBody } from "./errors.js";
export type { ProblemDocument } from "./errors.js";
