import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { clampRetryAfter, ProtocolError, toProtocolError, type ErrorCode } from "../../protocol";
import { edgePath } from "../../protocol/routes";

/**
 * The one place that decides an error's shape, by the route: on the Messages API's routes
 * (`/v1/messages` and below) Anthropic's `{ type: "error", error: { type, message, code },
 * request_id: null }`, elsewhere OpenAI's `{ error: { message, type, code, param: null } }`; both
 * with the code's HTTP status and the project's stable `code`. Retryable errors carry
 * `retry-after` (`retryAfter`). Internal errors answer a generic message; the details go to the
 * log only.
 *
 * @example return errorResponse(c, new ProtocolError("unauthorized", "missing API key"));
 */
export function errorResponse(c: Context, err: ProtocolError): Response {
  const headers: Record<string, string> = err.retryable ? { "retry-after": retryAfter(err) } : {};
  if (isMessagesPath(c.req.path)) return c.json(anthropicErrorBody(err), err.httpStatus, headers);
  return c.json(openAiErrorBody(err), err.httpStatus, headers);
}

/**
 * OpenAI's error body for `err` (`error.type` OpenAI's, `error.code` the project's stable code):
 * responses, and a Responses WebSocket's `error` event (`{ type: "error", status, ...body }`).
 *
 * @example openAiErrorBody(new ProtocolError("not_found", "no such response")) // { error: { message: "no such response", type: "not_found_error", code: "not_found", param: null } }
 */
export function openAiErrorBody(err: ProtocolError) {
  return { error: { message: publicMessage(err), type: openAiErrorType(err.code), code: err.code, param: null } };
}

/**
 * Anthropic's error body for `err` (responses and the stream's `error` event): `error.type` is
 * Anthropic's (`anthropicErrorType`), `error.code` the project's stable code.
 *
 * @example anthropicErrorBody(new ProtocolError("backend_unavailable", "busy")) // { type: "error", error: { type: "overloaded_error", message: "busy", code: "backend_unavailable" }, request_id: null }
 */
export function anthropicErrorBody(err: ProtocolError) {
  return { type: "error" as const, error: { type: anthropicErrorType(err.code), message: publicMessage(err), code: err.code }, request_id: null };
}

/**
 * The `retry-after` header of a retryable error, in seconds: the failing backend's estimate when
 * it sent one (an `overloaded` refusal: its queued prompt tokens over its measured prefill rate),
 * held to 1..MAX_RETRY_AFTER_S (60); else 1.
 *
 * @example retryAfter(new ProtocolError("overloaded", "queue full", { retryAfterS: 7 })) // "7"
 */
export function retryAfter(err: ProtocolError): string {
  return String(err.retryAfterS === undefined ? 1 : clampRetryAfter(err.retryAfterS));
}

const MESSAGES_PATH = edgePath("anthropic", "messages");

/** True for the Messages API's routes, whose errors are Anthropic-shaped (unknown paths below it too). */
export function isMessagesPath(path: string): boolean {
  return path === MESSAGES_PATH || path.startsWith(`${MESSAGES_PATH}/`);
}

function publicMessage(err: ProtocolError): string {
  return err.code === "internal_error" ? "internal server error" : err.message;
}

/**
 * Anthropic's error type for each code (its HTTP status stays the project's: a 503 is
 * `overloaded_error`, as Anthropic's 529 is; a 429 `overloaded` is `rate_limit_error`, as
 * Anthropic's 429 is).
 */
const ANTHROPIC_ERROR_TYPES: Record<ErrorCode, string> = {
  malformed_msgpack: "invalid_request_error",
  invalid_request: "invalid_request_error",
  context_length_exceeded: "invalid_request_error",
  invalid_schema: "invalid_request_error",
  unsupported_schema: "invalid_request_error",
  unknown_tool: "invalid_request_error",
  max_tokens_too_small: "invalid_request_error",
  limit_exceeded: "invalid_request_error",
  headers_too_large: "request_too_large",
  upgrade_required: "invalid_request_error",
  response_already_in_flight: "conflict_error",
  websocket_connection_limit_reached: "invalid_request_error",
  unauthorized: "authentication_error",
  not_found: "not_found_error",
  unknown_model: "not_found_error",
  payload_too_large: "request_too_large",
  trajectory_busy: "conflict_error",
  state_unknown: "conflict_error",
  internal_error: "api_error",
  backend_unavailable: "overloaded_error",
  overloaded: "rate_limit_error",
};

export function anthropicErrorType(code: ErrorCode): string {
  return ANTHROPIC_ERROR_TYPES[code];
}

/** Any thrown value as the project's error (Hono HTTP exceptions mapped by status). */
export function edgeError(e: unknown): ProtocolError {
  if (e instanceof HTTPException) {
    if (e.status === 401) return new ProtocolError("unauthorized", e.message || "unauthorized");
    if (e.status === 404) return new ProtocolError("not_found", e.message || "not found");
    if (e.status === 413) return new ProtocolError("payload_too_large", e.message || "request body too large");
    return new ProtocolError("invalid_request", e.message || `HTTP ${e.status}`);
  }
  return toProtocolError(e);
}

function openAiErrorType(code: ErrorCode): string {
  switch (code) {
    case "unauthorized":
      return "authentication_error";
    case "overloaded":
      return "rate_limit_error";
    case "backend_unavailable":
    case "internal_error":
      return "server_error";
    case "not_found":
    case "unknown_model":
      return "not_found_error";
    case "trajectory_busy":
    case "response_already_in_flight":
      return "conflict_error";
    default:
      return "invalid_request_error";
  }
}
