import type { Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { ProtocolError, toProtocolError, type ErrorCode } from "../../protocol";

/**
 * An OpenAI-shaped error body `{ error: { message, type, code } }` with the code's HTTP status.
 * Internal errors answer a generic message; the details go to the log only.
 *
 * @example return errorResponse(c, new ProtocolError("unauthorized", "missing API key"));
 */
export function errorResponse(c: Context, err: ProtocolError): Response {
  const message = err.code === "internal_error" ? "internal server error" : err.message;
  const headers: Record<string, string> = err.retryable ? { "retry-after": "1" } : {};
  return c.json({ error: { message, type: openAiErrorType(err.code), code: err.code, param: null } }, err.httpStatus, headers);
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
    case "backend_unavailable":
    case "internal_error":
      return "server_error";
    case "not_found":
    case "unknown_model":
      return "not_found_error";
    case "trajectory_busy":
      return "conflict_error";
    default:
      return "invalid_request_error";
  }
}
