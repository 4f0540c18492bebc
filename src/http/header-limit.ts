import type { MiddlewareHandler } from "hono";
import { ProtocolError } from "../../protocol";
import { edgeSettings } from "../../durable-objects/settings";
import { errorResponse } from "./errors";

/**
 * Refuses a request whose header names and values together pass MAX_HEADER_BYTES (431
 * `headers_too_large`), on every route and before any key is checked. Header values are byte
 * strings, so a string's length is its byte count. (Past this, workerd and Cloudflare's front end
 * have their own limits: docs/edge.md, "Limits".)
 *
 * @example app.use(headerLimit());
 */
export function headerLimit(): MiddlewareHandler<{ Bindings: Env }> {
  return async (c, next) => {
    const max = edgeSettings(c.env).maxHeaderBytes;
    let bytes = 0;
    for (const [name, value] of c.req.raw.headers) bytes += name.length + value.length;
    if (bytes > max) return errorResponse(c, new ProtocolError("headers_too_large", `the request headers (${bytes} bytes of names and values) exceed the limit of ${max} bytes (MAX_HEADER_BYTES)`));
    await next();
  };
}
