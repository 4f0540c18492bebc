import type { Context } from "hono";
import { ProtocolError } from "../../protocol";
import { edgeSettings } from "../../durable-objects/settings";

/**
 * The edge's one body reader: a JSON body, refusing more than MAX_BODY_BYTES (413
 * `payload_too_large`, checked on the declared length and while reading) and malformed JSON
 * (400 `invalid_request`).
 *
 * @example const json = await readJson(c);
 */
export async function readJson<E extends { Bindings: Env }>(c: Context<E>): Promise<unknown> {
  const maxBytes = edgeSettings(c.env).maxBodyBytes;
  const declared = Number(c.req.header("content-length") ?? "0");
  if (declared > maxBytes) throw tooLarge(declared, maxBytes);
  const body = c.req.raw.body;
  if (!body) throw new ProtocolError("invalid_request", "the request has no body");
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      throw tooLarge(total, maxBytes);
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(total);
  let off = 0;
  for (const ch of chunks) {
    bytes.set(ch, off);
    off += ch.byteLength;
  }
  try {
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (e) {
    throw new ProtocolError("invalid_request", `the body is not valid JSON: ${(e as Error).message}`);
  }
}

function tooLarge(bytes: number, max: number): ProtocolError {
  return new ProtocolError("payload_too_large", `the request body (${bytes} bytes or more) exceeds the limit of ${max} bytes`);
}
