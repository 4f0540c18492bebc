import { decodeFrame, decodeTokenizeResponse, encode } from "../../protocol/codec";
import { ProtocolError, toProtocolError } from "../../protocol/errors";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type TokenizeRequest } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { BackendTarget } from "./backend-client";

/**
 * Asks a backend how many prompt tokens a conversation has (`POST /v1/tokenize`: the chat template
 * rendered with the tools and the generation prompt, then tokenized, as a full turn's prompt).
 * The backend's own errors (`unknown_model`, `invalid_request` for a template that rejects the
 * messages) are thrown as they are; an unreachable or unreadable backend, or one that refuses the
 * route (`not_found`: an older backend; `unauthorized`: another secret), is `backend_unavailable`.
 *
 * @example const n = await countPromptTokens(target, { messages, tools }, 10_000);
 */
export async function countPromptTokens(target: BackendTarget, req: TokenizeRequest, timeoutMs: number): Promise<number> {
  let res: Response;
  let bytes: Uint8Array;
  try {
    res = await fetch(`${target.url}${ROUTES.backend.tokenize}`, {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: target.secret },
      body: encode(req),
      signal: AbortSignal.timeout(timeoutMs),
    });
    bytes = new Uint8Array(await res.arrayBuffer());
  } catch (e) {
    throw new ProtocolError("backend_unavailable", `backend ${target.url} is unavailable or timed out: ${toProtocolError(e).message}`, { cause: e });
  }
  if (!res.ok) {
    const frame = decodeFrame(bytes);
    // A backend's route or secret problem is not the client's: only the answer's own errors pass.
    if (frame.ok && frame.value.type === "error" && frame.value.code !== "not_found" && frame.value.code !== "unauthorized") throw ProtocolError.fromFrame(frame.value);
    throw new ProtocolError("backend_unavailable", `backend ${target.url} answered ${res.status} to ${ROUTES.backend.tokenize}`);
  }
  const answer = decodeTokenizeResponse(bytes);
  if (!answer.ok) throw new ProtocolError("backend_unavailable", `backend ${target.url} sent an unreadable token count: ${answer.error.message}`);
  return answer.value.promptTokens;
}
