import { ProtocolError } from "../../protocol/errors";
import type { ChatMessage } from "../../protocol/messages";
import type { StoredResponse, TurnInput } from "./turn-types";

/**
 * The chat turn (the whole transcript) a Responses API continuation (`previous_response_id`) stands for:
 * the transcript up to that response's reply, without that request's `instructions` (they are
 * not carried over, as OpenAI's API has it) and with this request's in front, then the new input.
 * The turn is an ordinary `chat` turn after this; when the response is the trajectory's latest,
 * the transcript only grew (a delta turn) unless the instructions changed.
 *
 * @example continuedTurn(input, stored, transcript).messages // [system, ...earlier, reply, ...new]
 */
export function continuedTurn(input: TurnInput, stored: StoredResponse, transcript: readonly ChatMessage[]): TurnInput {
  const previous = input.previous;
  if (!previous) throw new Error("continuedTurn needs input.previous");
  if (stored.rewritten) {
    throw new ProtocolError("invalid_request", "previous_response_id: a later turn rewrote the transcript this response belongs to; it can be retrieved but not continued");
  }
  let base = transcript.slice(0, stored.messageEnd);
  if (stored.instructions) base = base.slice(1);
  if (previous.instructions !== null) base = [{ role: "system", content: previous.instructions }, ...base];
  const { previous: _previous, ...rest } = input;
  return {
    ...rest,
    kind: "chat",
    messages: [...base, ...input.messages],
    ...(input.response ? { response: { ...input.response, inputFrom: base.length, instructions: previous.instructions !== null } } : {}),
  };
}
