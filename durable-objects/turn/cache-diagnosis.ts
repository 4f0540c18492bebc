import type { ChatMessage } from "../../protocol/messages";
import { explainBreak, type PrefixBreak, type PrefixBreakCause } from "./prefix-break";

/**
 * Cache diagnostics (docs/cache-diagnostics.md): a turn compared with an earlier turn of its
 * trajectory that the client names (Messages `diagnostics.previous_message_id`, Responses
 * `prompt_cache_options.comparison_response_id`), in terms both hosted APIs share. The HTTP layer
 * says it in each API's own shape (src/http/cache-diagnostics.ts).
 */

/** The earlier turn a turn asks to be compared with. */
export type CompareWith =
  /** Messages API: this answer's id (stored with the turn, so a later turn can name it) and the earlier answer's (null: none yet). */
  | { api: "messages"; id: string; previous: string | null }
  /** Responses API: the earlier response's token, and the trajectory its id names. */
  | { api: "responses"; token: string; trajectoryId: string };

/** Where the request first departs from the compared one: the part of the prompt a hosted API names. */
export type DivergedPart = "none" | "model" | "tools" | "system" | "messages";

export type CacheDiagnosis =
  /** Nothing to compare with: the id names no turn of this trajectory (or the first turn named none). */
  | { status: "not-found" }
  /** The named turn exists but cannot be compared (`why` says so, for the docs and logs). */
  | { status: "unavailable"; why: string }
  | {
      status: "compared";
      /** The named turn's number. */
      turn: number;
      part: DivergedPart;
      /** Our explainer's cause (prefix-break.ts), or `model-changed`. */
      cause: PrefixBreakCause | "model-changed";
      /** What the named turn left reusable: its prompt and reply tokens but the reply's last (cache-miss.ts counts the same). */
      reusableTokens: number;
      /** Of those, an estimate of how many precede the first difference (by characters; before the backend counted anything). */
      keptTokens: number;
    };

/** An earlier turn as a comparison needs it (a stored Messages answer, or a stored response). */
export interface NamedTurn {
  turn: number;
  /** Its transcript is the stored messages [0, messageEnd), its reply the last of them. */
  messageEnd: number;
  /** A later turn rewrote the stored transcript below `messageEnd`: its request is gone. */
  rewritten: boolean;
  /** SHA-256 hex of its tools as stored (canonical JSON). */
  toolsHash: string;
  /** The model that served it (null: not recorded). */
  model: string | null;
  promptTokens: number;
  completionTokens: number;
}

/**
 * Compares a turn with the named one. The latest turn's comparison is exactly this turn's prefix
 * break (`prefixBreak`, the explainer's); an earlier turn's is explained against its stored
 * transcript, while no later turn rewrote it (else `unavailable`). Model and tools are compared
 * first: they come before every message.
 *
 * @example
 * diagnose({ named, latestTurn: 3, stored, incoming, prefixBreak, toolsHash, model: "m" })
 * // { status: "compared", turn: 3, part: "system", cause: "date", reusableTokens: 911, keptTokens: 40 }
 */
export function diagnose(p: {
  named: NamedTurn | null;
  /** The number of the trajectory's latest turn. */
  latestTurn: number;
  /** The stored transcript, before this turn. */
  stored: readonly ChatMessage[];
  /** This turn's whole transcript, as it will be stored. */
  incoming: readonly ChatMessage[];
  prefixBreak: PrefixBreak;
  toolsHash: string;
  model: string | null;
}): CacheDiagnosis {
  const { named } = p;
  if (!named) return { status: "not-found" };
  const reusableTokens = Math.max(0, named.promptTokens + named.completionTokens - 1);
  const compared = (part: DivergedPart, cause: PrefixBreakCause | "model-changed", keptTokens: number): CacheDiagnosis => ({ status: "compared", turn: named.turn, part, cause, reusableTokens, keptTokens });
  if (named.model !== null && p.model !== null && named.model !== p.model) return compared("model", "model-changed", 0);
  let before: readonly ChatMessage[];
  let b: PrefixBreak;
  if (named.turn === p.latestTurn) {
    before = p.stored;
    b = p.prefixBreak;
  } else {
    if (named.rewritten) return { status: "unavailable", why: "a later turn rewrote the transcript the named turn was built on" };
    if (named.toolsHash !== p.toolsHash) return compared("tools", "tools-changed", 0);
    before = p.stored.slice(0, named.messageEnd);
    b = explainBreak(before, p.incoming, undefined, undefined);
  }
  const part = partOf(b, before, p.incoming);
  if (part === "none") return compared("none", b.cause, reusableTokens);
  if (part === "tools") return compared("tools", b.cause, 0);
  const total = charsOf(before, before.length, 0);
  const kept = total === 0 ? 0 : Math.round((reusableTokens * charsOf(before, b.message ?? 0, b.offset ?? 0)) / total);
  return compared(part, b.cause, Math.min(reusableTokens, kept));
}

/**
 * The part a prefix break lies in: none (the transcript only grew, or a retry of the named turn's
 * request: its prefix is intact), tools (the tool definitions, or their JSON), system (message 0
 * where either transcript has a system prompt there), else messages.
 *
 * @example partOf({ cause: "date", message: 0, field: "content", offset: 12 }, stored, incoming) // "system"
 */
export function partOf(b: PrefixBreak, before: readonly ChatMessage[], incoming: readonly ChatMessage[]): DivergedPart {
  if (b.cause === "none" || b.cause === "regenerate") return "none";
  if (b.cause === "tools-changed" || b.field === "tools") return "tools";
  if (b.message === 0 && (before[0]?.role === "system" || incoming[0]?.role === "system")) return "system";
  return "messages";
}

/** Characters of the transcript before message `index`'s character `offset` (content, tool-call arguments). */
function charsOf(ms: readonly ChatMessage[], index: number, offset: number): number {
  let n = 0;
  for (let i = 0; i < Math.min(index, ms.length); i++) n += (ms[i]!.content ?? "").length + (ms[i]!.tool_calls ?? []).reduce((s, c) => s + c.function.arguments.length + c.function.name.length, 0);
  return n + (index < ms.length ? Math.min(offset, (ms[index]!.content ?? "").length) : 0);
}
