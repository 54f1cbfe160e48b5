export { CoordinatorClient, signerFromJwk } from "./client.js";
export type { Page } from "../model/index.js";
export type { ClientOptions, Countersigner, Fetcher, PageQuery, RequestExtras } from "./client.js";
export { ApiError, parseAnswerBody } from "./errors.js";
export type { ProblemDocument, RpcErrorObject } from "./errors.js";
export { DEFAULT_RECONNECT, followStream, sleep, StreamLostError, StreamProtocolError } from "./events.js";
export type { ReconnectPolicy, StreamOptions, StreamSource } from "./events.js";
export { SseParser } from "./sse.js";
export type { SseMessage } from "./sse.js";
