/** An RFC 9457 problem document as the coordinator sends it. */
export interface ProblemDocument {
  type: string;
  title: string;
  status: number;
  detail?: string;
  field?: string;
  errors?: { field: string; message: string }[];
  needed?: string[];
  [extension: string]: unknown;
}

/** A non-2xx answer of the API, carrying its problem document. */
export class ApiError extends Error {
  override name = "ApiError";
  constructor(
    readonly status: number,
    readonly problem: ProblemDocument,
  ) {
    super(`${status} ${problem.title}${problem.detail ? `: ${problem.detail}` : ""}`);
  }

  /** The last path segment of the problem type, e.g. `signature-expired`. */
  get code(): string {
    return this.problem.type.split("/").pop() ?? this.problem.type;
  }
}

/**
 * An answer's body as JSON, or `undefined` when it is empty or not JSON (a proxy's HTML error page,
 * a cut-off body): callers fall back to the status and the raw text.
 */
export function parseAnswerBody(text: string): unknown {
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
