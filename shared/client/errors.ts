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

/** A JSON-RPC error object; `data` carries the problem document. */
export interface RpcErrorObject {
  code: number;
  message: string;
  data?: ProblemDocument;
}

/**
 * A response's JSON answer (undefined for 204); a non-2xx answer becomes an ApiError carrying its
 * problem document (or one made from the status when the body is not one).
 */
export async function readAnswer(response: Response): Promise<unknown> {
  if (response.status === 204) return undefined;
  const text = await response.text();
  const parsed = parseAnswerBody(text);
  if (!response.ok) {
    const problem =
      parsed && typeof parsed === "object" && "type" in parsed
        ? (parsed as ProblemDocument)
        : parsed && typeof parsed === "object" && "error" in parsed
          ? ((parsed as { error: RpcErrorObject }).error.data ?? {
              type: "about:blank",
              title: response.statusText,
              status: response.status,
            })
          : {
              type: "about:blank",
              title: response.statusText || "Error",
              status: response.status,
              detail: text.slice(0, 200),
            };
    throw new ApiError(response.status, problem);
  }
  return parsed;
}
