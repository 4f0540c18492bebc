import { Hono, type Context } from "hono";
import { HTTPException } from "hono/http-exception";
import { ProtocolError, toProtocolError, type ErrorCode } from "../protocol";

/**
 * The edge Worker: the HTTP surface clients talk to. This is the skeleton (health and model
 * list); chat completions, auth and the Durable Objects come in later.
 */

/** Bindings from `wrangler.toml`. */
export interface Env {
  /** Comma-separated base URLs of the GPU backends. */
  BACKEND_URLS: string;
}

/** The model the local backend pool serves by default. */
export const DEFAULT_MODEL_ID = "demo-llama-random";

const app = new Hono<{ Bindings: Env }>();

app.get("/healthz", (c) => c.json({ ok: true }));

app.get("/v1/models", (c) =>
  c.json({
    object: "list",
    data: [{ id: DEFAULT_MODEL_ID, object: "model", owned_by: "agent-edge" }],
  }),
);

app.notFound((c) => errorResponse(c, new ProtocolError("not_found", `no route ${c.req.method} ${c.req.path}`)));

app.onError((e, c) => {
  const err = e instanceof HTTPException ? fromHttpException(e) : toProtocolError(e);
  if (err.code === "internal_error") console.error("unhandled error", e);
  return errorResponse(c, err);
});

export default app;

// ---------------------------------------------------------------------------------------------

/**
 * An OpenAI-shaped error body `{ error: { message, type, code } }` with the code's HTTP status.
 * Internal errors answer a generic message; the details go to the log only.
 */
function errorResponse(c: Context, err: ProtocolError): Response {
  const message = err.code === "internal_error" ? "internal server error" : err.message;
  return c.json({ error: { message, type: openAiErrorType(err.code), code: err.code } }, err.httpStatus);
}

function openAiErrorType(code: ErrorCode): string {
  switch (code) {
    case "unauthorized":
      return "authentication_error";
    case "overloaded":
    case "internal_error":
      return "server_error";
    default:
      return "invalid_request_error";
  }
}

function fromHttpException(e: HTTPException): ProtocolError {
  const message = e.message || `HTTP ${e.status}`;
  if (e.status === 401) return new ProtocolError("unauthorized", message, { cause: e });
  if (e.status === 404) return new ProtocolError("not_found", message, { cause: e });
  if (e.status === 503) return new ProtocolError("overloaded", message, { cause: e });
  if (e.status >= 500) return new ProtocolError("internal_error", message, { cause: e });
  return new ProtocolError("invalid_request", message, { cause: e });
}
