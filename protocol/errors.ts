import type { ErrorCode, ErrorFrame } from "./messages";

/**
 * The project's one error type: a stable `code` from the closed {@link ErrorCode} union, a
 * human-readable message, whether a retry may succeed, and the HTTP status to answer with.
 *
 * Throw it for expected failures anywhere (edge, Durable Objects, backend); everything else is
 * turned into `internal_error` by {@link toProtocolError}.
 */

/** HTTP status and retry default of one error code. */
export interface ErrorCodeInfo {
  httpStatus: number;
  retryable: boolean;
}

/** Every {@link ErrorCode} with its HTTP status and whether a retry may succeed by default. */
export const ERROR_CODE_INFO = {
  malformed_msgpack: { httpStatus: 400, retryable: false },
  invalid_request: { httpStatus: 400, retryable: false },
  unauthorized: { httpStatus: 401, retryable: false },
  unknown_model: { httpStatus: 404, retryable: false },
  state_unknown: { httpStatus: 409, retryable: false },
  context_length_exceeded: { httpStatus: 400, retryable: false },
  /** The backend's queued work is past its bound (`--max-queued-tokens`): retry after `Retry-After`. */
  overloaded: { httpStatus: 429, retryable: true },
  not_found: { httpStatus: 404, retryable: false },
  payload_too_large: { httpStatus: 413, retryable: false },
  trajectory_busy: { httpStatus: 409, retryable: true },
  backend_unavailable: { httpStatus: 503, retryable: true },
  internal_error: { httpStatus: 500, retryable: false },
  /** A response format's or tool's JSON schema is not a valid schema. */
  invalid_schema: { httpStatus: 400, retryable: false },
  /** A schema uses a keyword the grammar compiler does not support (the message names it). */
  unsupported_schema: { httpStatus: 400, retryable: false },
  /** `tool_choice` names a tool that is not in `tools`, or asks for calls without tools. */
  unknown_tool: { httpStatus: 400, retryable: false },
  /** `max_tokens` is smaller than the shortest reply the constraint allows. */
  max_tokens_too_small: { httpStatus: 400, retryable: false },
  /** A request passes one of the edge's configured caps (messages, tools): the message names the cap and its setting. */
  limit_exceeded: { httpStatus: 400, retryable: false },
  /** The request's headers pass the edge's cap on header bytes. */
  headers_too_large: { httpStatus: 431, retryable: false },
  /** `GET /v1/responses` without `Upgrade: websocket` (that path's GET is the Responses API's WebSocket transport). */
  upgrade_required: { httpStatus: 426, retryable: false },
  /** A `response.create` on a Responses WebSocket whose previous response is still streaming (one in flight per connection). */
  response_already_in_flight: { httpStatus: 409, retryable: true },
  /** A Responses WebSocket past its lifetime (60 minutes): open a new connection and go on. */
  websocket_connection_limit_reached: { httpStatus: 400, retryable: false },
} as const satisfies Record<ErrorCode, ErrorCodeInfo>;

/** The HTTP statuses error codes answer with (400, 401, 404, 409, 413, 426, 429, 431, 500, 503). */
export type ErrorHttpStatus = (typeof ERROR_CODE_INFO)[ErrorCode]["httpStatus"];

/** All error codes, in the order of {@link ERROR_CODE_INFO}. */
export const ERROR_CODES: readonly ErrorCode[] = Object.freeze(Object.keys(ERROR_CODE_INFO) as ErrorCode[]);

/**
 * True when `value` is one of the {@link ErrorCode} strings.
 *
 * @example isErrorCode("overloaded") // true
 */
export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.prototype.hasOwnProperty.call(ERROR_CODE_INFO, value);
}

export interface ProtocolErrorOptions {
  /** Overrides the code's default from {@link ERROR_CODE_INFO}. */
  retryable?: boolean;
  /** The underlying failure, kept for logs (standard `Error.cause`). */
  cause?: unknown;
  /** `overloaded`: the backend's estimate of the seconds until a retry may be taken (`retryAfterSeconds`). */
  retryAfterS?: number | undefined;
}

/** The longest `Retry-After` the edge answers and a backend estimates, in seconds. */
export const MAX_RETRY_AFTER_S = 60;

/**
 * Seconds until `queuedTokens` are prefilled at `tokensPerS`, rounded up to whole seconds, at
 * least 1 and at most MAX_RETRY_AFTER_S: an overloaded backend's `retryAfterS`. Undefined
 * without a measured rate.
 *
 * @example retryAfterSeconds(16_384, 640) // 26
 */
export function retryAfterSeconds(queuedTokens: number, tokensPerS: number | undefined): number | undefined {
  if (tokensPerS === undefined || !(tokensPerS > 0)) return undefined;
  return clampRetryAfter(Math.ceil(queuedTokens / tokensPerS));
}

/**
 * A `Retry-After` in whole seconds within 1..MAX_RETRY_AFTER_S (1 for a value that is not a
 * finite number).
 *
 * @example clampRetryAfter(0.2) // 1
 */
export function clampRetryAfter(seconds: number): number {
  if (!Number.isFinite(seconds)) return 1;
  return Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.ceil(seconds)));
}

/**
 * An expected failure with a stable code.
 *
 * @example
 * throw new ProtocolError("state_unknown", "state s-42 is unknown: resend the full transcript");
 * // err.httpStatus === 409, err.retryable === false
 */
export class ProtocolError extends Error {
  override readonly name = "ProtocolError";
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly httpStatus: ErrorHttpStatus;
  /** Seconds until a retry may be taken, when the failing side estimated it (an overloaded backend). */
  readonly retryAfterS: number | undefined;

  constructor(code: ErrorCode, message: string, options: ProtocolErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    const info = ERROR_CODE_INFO[code];
    this.code = code;
    this.retryable = options.retryable ?? info.retryable;
    this.httpStatus = info.httpStatus;
    this.retryAfterS = options.retryAfterS;
  }

  /**
   * The error as a wire frame (the last frame of a failed `/v1/generate` stream).
   *
   * @example new ProtocolError("overloaded", "queue full").toFrame()
   * // { type: "error", code: "overloaded", message: "queue full", retryable: true }
   */
  toFrame(): ErrorFrame {
    return { type: "error", code: this.code, message: this.message, retryable: this.retryable, ...(this.retryAfterS !== undefined ? { retryAfterS: this.retryAfterS } : {}) };
  }

  /**
   * The error carried by a received error frame (or a turn's error event, the same fields), so
   * it can be rethrown on this side.
   *
   * @example throw ProtocolError.fromFrame(frame) // frame.type === "error"
   */
  static fromFrame(frame: Pick<ErrorFrame, "code" | "message" | "retryable" | "retryAfterS">): ProtocolError {
    return new ProtocolError(frame.code, frame.message, { retryable: frame.retryable, retryAfterS: frame.retryAfterS });
  }
}

/**
 * Turns any thrown value into a {@link ProtocolError}: a `ProtocolError` is returned as is,
 * anything else becomes `internal_error` with the original message (and the value as `cause`).
 *
 * @example
 * try { await work(); } catch (e) { const err = toProtocolError(e); sink(err.toFrame()); }
 */
export function toProtocolError(e: unknown): ProtocolError {
  if (e instanceof ProtocolError) return e;
  return new ProtocolError("internal_error", messageOf(e), { cause: e });
}

function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message || e.name;
  if (typeof e === "string") return e;
  if (typeof e === "object" && e !== null && "message" in e && typeof e.message === "string") return e.message;
  try {
    return `non-error value thrown: ${String(e)}`;
  } catch {
    return "non-error value thrown";
  }
}
