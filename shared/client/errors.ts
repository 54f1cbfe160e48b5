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
