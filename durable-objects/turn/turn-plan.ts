import { ProtocolError } from "../../protocol/errors";
import type { ChatMessage } from "../../protocol/messages";
import { canonicalizeTranscript, canonicalToolDefinitions, withQuirks, type Repairs } from "./canonicalize";
import { explainBreak, type PrefixBreak } from "./prefix-break";
import { checkToolAnswers } from "./tool-answers";
import { canonicalTools, diffTranscript, normalizeMessage } from "./transcript-diff";
import type { FullReason, TrajectoryMeta, TurnInput } from "./turn-types";

/** What a turn sends, decided before any backend is asked. */
export interface TurnPlan {
  mode: "delta" | "full";
  fullReason: FullReason | null;
  /** Stored messages kept as they are; the rest of `fullTranscript` is written by the commit. */
  keep: number;
  newMessages: ChatMessage[];
  fullTranscript: ChatMessage[];
  tools: NonNullable<TurnInput["tools"]>;
  /** Why the transcript is not an extension of the stored one (cause "none" when it is). */
  prefixBreak: PrefixBreak;
  /** Whether messages and tools were canonicalized (then the reply's tool calls are too). */
  canonical: boolean;
  /** What canonicalization changed and the client quirks the edge repaired, when there is any. */
  repaired?: Repairs;
}

/**
 * Plans a turn (pure): canonicalizes the incoming messages (when `canonical`), compares them with
 * the stored transcript, names the prefix break, and decides delta or full: full on the first
 * turn (or without a state), when the transcript diverged, the tools changed, or the turn goes
 * to another backend than the state's (`backendUrl`). Throws `invalid_request` for an empty
 * transcript, an append turn without messages, or a tool message that answers no call of the
 * assistant message it follows (`checkToolAnswers`).
 *
 * @example planTurn({ meta, stored, input, backendUrl: meta.backendUrl, canonical: true }).mode // "delta"
 */
export function planTurn(p: { meta: TrajectoryMeta; stored: ChatMessage[]; input: TurnInput; backendUrl: string; canonical: boolean }): TurnPlan {
  const { meta, stored, input, canonical } = p;
  // Safe canonicalization: tool-call ids by position, JSON arguments and tools with sorted keys.
  // On an append turn the stored messages (already canonical) give the new ones their positions.
  const normalized = input.messages.map(normalizeMessage);
  // Tool answers are checked in the client's own ids, against the whole transcript: an append
  // turn's tool message may answer a stored call (the edge gave the client its stored id).
  if (input.kind === "append") checkToolAnswers([...stored, ...normalized], stored.length);
  else checkToolAnswers(normalized);
  let incoming = normalized;
  let repaired: Repairs | undefined;
  if (canonical) {
    const c = canonicalizeTranscript(input.kind === "append" ? [...stored, ...normalized] : normalized);
    incoming = input.kind === "append" ? c.messages.slice(stored.length) : c.messages;
    if (c.repaired.toolCallIds + c.repaired.jsonArguments > 0) repaired = c.repaired;
  }
  repaired = withQuirks(repaired, input.quirks);
  let keep = stored.length;
  let newMessages: ChatMessage[];
  let fullTranscript: ChatMessage[];
  let diverged = false;
  if (input.kind === "append") {
    if (incoming.length === 0) throw new ProtocolError("invalid_request", "messages must hold at least one new message");
    newMessages = incoming;
    fullTranscript = [...stored, ...incoming];
  } else {
    const diff = diffTranscript(stored, incoming);
    if (diff.kind === "extends") {
      newMessages = diff.newMessages;
    } else {
      diverged = true;
      keep = diff.index;
      newMessages = incoming.slice(diff.index);
    }
    fullTranscript = incoming;
  }
  if (fullTranscript.length === 0) throw new ProtocolError("invalid_request", "messages must not be empty");

  const storedTools = JSON.parse(meta.toolsJson) as NonNullable<TurnInput["tools"]>;
  const tools = input.tools ? (canonical ? canonicalToolDefinitions(input.tools) : input.tools) : storedTools;
  const prefixBreak = stored.length > 0 ? explainBreak(stored, fullTranscript, storedTools, tools) : { cause: "none" as const };
  let fullReason: FullReason | null = null;
  if (stored.length === 0 || !meta.stateId) fullReason = "first-turn";
  else if (diverged) fullReason = "diverged";
  else if (canonicalTools(tools) !== meta.toolsJson) fullReason = "tools-changed";
  else if (p.backendUrl !== meta.backendUrl) fullReason = "backend-changed";
  return { mode: fullReason ? "full" : "delta", fullReason, keep, newMessages, fullTranscript, tools, prefixBreak, canonical, ...(repaired ? { repaired } : {}) };
}
