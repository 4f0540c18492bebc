import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { canonicalJson } from "./canonicalize";
import { canonicalMessage } from "./transcript-diff";
import { coveredBy, volatileCause } from "./volatile-blocks";

/**
 * The prefix-break explainer: why a turn's transcript is not an extension of the stored one, so
 * the prompt's tokens differ from what the backend cached, from the first differing token on.
 *
 * Causes (checked in this order at the first difference):
 *   none                   the transcript only grew (nothing broke)
 *   tools-changed          the tool definitions differ (they render before every message)
 *   regenerate             the stored transcript minus its final assistant reply (a retry)
 *   removed-or-truncated   older messages were removed, or the transcript / a message was cut
 *   inserted-before        content was inserted before older messages (they reappear later)
 *   random-id              only tool-call ids, UUIDs, nonces or hex tokens differ
 *   json-serialization     the same JSON value serialized differently (key order, whitespace)
 *   git-status             the difference lies in Claude Code's gitStatus section (volatile-blocks.ts)
 *   cwd                    ... on a working-directory line or in a <cwd> tag
 *   date                   ... in a calendar date without a time of day (Today's date: ...)
 *   env                    ... elsewhere in an <env> or <environment_context> block
 *   timestamp              the differing text is a date or time
 *   system-prompt-changed  the system prompt (message 0) was edited otherwise
 *   assistant-edited       an assistant message was edited otherwise (content or tool calls)
 *   other                  anything else
 */
export type PrefixBreakCause =
  | "none"
  | "system-prompt-changed"
  | "tools-changed"
  | "timestamp"
  | "date"
  | "git-status"
  | "cwd"
  | "env"
  | "random-id"
  | "json-serialization"
  | "inserted-before"
  | "regenerate"
  | "removed-or-truncated"
  | "assistant-edited"
  | "other";

export const PREFIX_BREAK_CAUSES: readonly PrefixBreakCause[] = [
  "none",
  "system-prompt-changed",
  "tools-changed",
  "timestamp",
  "date",
  "git-status",
  "cwd",
  "env",
  "random-id",
  "json-serialization",
  "inserted-before",
  "regenerate",
  "removed-or-truncated",
  "assistant-edited",
  "other",
];

export interface PrefixBreak {
  cause: PrefixBreakCause;
  /** Index of the first differing message (absent for `none` and `tools-changed`). */
  message?: number;
  /** The differing field: content, role, tool_calls[i].id, tool_calls[i].arguments, tool_call_id, name, tools. */
  field?: string;
  /** Character offset of the first difference inside that field. */
  offset?: number;
  /** Up to SNIPPET characters around the difference, as stored and as sent. */
  before?: string;
  after?: string;
  /** The backend's first uncached prompt token (its cached token count), set after the turn. */
  uncachedFromToken?: number;
}

/** Characters of context kept on each side of a difference. */
export const SNIPPET = 40;

const DATE_TIME = [
  /\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?/,
  /\d{1,2}:\d{2}(:\d{2})?(\s?[AaPp][Mm])?/,
  /\d{1,2}\/\d{1,2}\/\d{2,4}/,
  /\b(Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*,?\s+\d{1,2}\s+(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)/,
  /\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*\.?\s+\d{1,2}(,\s*\d{4})?/,
  /\b1[6-9]\d{8}(\d{3})?\b/, // unix seconds / milliseconds
];
const RANDOM_ID = [
  /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i, // UUID
  /\b(call|toolu|tool|req|msg|run|id|chatcmpl)[_-][A-Za-z0-9]{6,}\b/, // vendor-style ids
  /\b[0-9a-f]{12,}\b/i, // hex nonces
  /\b(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{16,}\b/, // long mixed tokens
];

/**
 * Explains how `incoming` (canonicalized as the turn will store it) departs from `stored`.
 *
 * @example
 * explainBreak(stored, incoming, toolsBefore, toolsAfter) // { cause: "timestamp", message: 0, field: "content", offset: 112, ... }
 */
export function explainBreak(
  stored: readonly ChatMessage[],
  incoming: readonly ChatMessage[],
  toolsBefore: readonly ToolDefinition[] | undefined,
  toolsAfter: readonly ToolDefinition[] | undefined,
): PrefixBreak {
  const tb = JSON.stringify(toolsBefore ?? []);
  const ta = JSON.stringify(toolsAfter ?? []);
  if (stored.length > 0 && tb !== ta) {
    const offset = firstDiff(tb, ta);
    const sameValue = canonicalJson(toolsBefore ?? []) === canonicalJson(toolsAfter ?? []);
    return { cause: sameValue ? "json-serialization" : "tools-changed", field: "tools", offset, ...snippets(tb, ta, offset) };
  }
  const keys = (ms: readonly ChatMessage[]) => ms.map(canonicalMessage);
  const s = keys(stored);
  const n = keys(incoming);
  let i = 0;
  while (i < s.length && i < n.length && s[i] === n[i]) i++;
  if (i === s.length) return { cause: "none" };
  if (i === n.length) {
    // The stored transcript minus its final assistant reply: a retry or regenerate of that turn.
    if (s.length === n.length + 1 && stored[i]!.role === "assistant") {
      return { cause: "regenerate", message: i, field: "messages", offset: 0, before: clip(stored[i]!.content ?? "", 0), after: "" };
    }
    // The transcript ends before the stored one does.
    return { cause: "removed-or-truncated", message: i, field: "messages", offset: 0 };
  }
  // Older messages reappear later in the incoming transcript: something was inserted before them.
  const at = n.indexOf(s[i]!, i + 1);
  if (at > i && s.slice(i, i + Math.min(s.length - i, n.length - at)).every((k, j) => k === n[at + j])) {
    const added = incoming[i]!;
    return { cause: "inserted-before", message: i, field: "messages", offset: 0, before: "", after: clip(added.content ?? "", 0) };
  }
  // Stored messages are missing: the incoming one matches a later stored message.
  const skip = s.indexOf(n[i]!, i + 1);
  if (skip > i) return { cause: "removed-or-truncated", message: i, field: "messages", offset: 0, before: clip(stored[i]!.content ?? "", 0), after: "" };
  return explainMessage(i, stored[i]!, incoming[i]!);
}

/**
 * The first differing field of two messages at the same index, and its cause. Where no more
 * specific cause applies, an edited assistant message is `assistant-edited`, anything else `other`.
 */
function explainMessage(index: number, a: ChatMessage, b: ChatMessage): PrefixBreak {
  const edited: PrefixBreakCause = a.role === "assistant" && b.role === "assistant" ? "assistant-edited" : "other";
  const at = (field: string, x: string, y: string, cause: PrefixBreakCause): PrefixBreak => {
    const offset = firstDiff(x, y);
    return { cause, message: index, field, offset, ...snippets(x, y, offset) };
  };
  if (a.role !== b.role) return at("role", a.role, b.role, "other");
  const ac = a.content ?? "";
  const bc = b.content ?? "";
  if (ac !== bc) {
    const offset = firstDiff(ac, bc);
    // A cut message: the new text is a prefix of the old one.
    if (bc.length < ac.length && ac.startsWith(bc)) return { cause: "removed-or-truncated", message: index, field: "content", offset, ...snippets(ac, bc, offset) };
    const cause = textCause(ac, bc, offset) ?? (index === 0 && a.role === "system" ? "system-prompt-changed" : edited);
    return { cause, message: index, field: "content", offset, ...snippets(ac, bc, offset) };
  }
  const ca = a.tool_calls ?? [];
  const cb = b.tool_calls ?? [];
  for (let k = 0; k < Math.max(ca.length, cb.length); k++) {
    const x = ca[k];
    const y = cb[k];
    if (!x || !y) return { cause: x ? "removed-or-truncated" : edited, message: index, field: `tool_calls[${k}]`, offset: 0 };
    if (x.id !== y.id) return at(`tool_calls[${k}].id`, x.id, y.id, "random-id");
    if (x.function.name !== y.function.name) return at(`tool_calls[${k}].name`, x.function.name, y.function.name, edited);
    if (x.function.arguments !== y.function.arguments) {
      const same = sameJson(x.function.arguments, y.function.arguments);
      const offset = firstDiff(x.function.arguments, y.function.arguments);
      const cause = same ? "json-serialization" : (textCause(x.function.arguments, y.function.arguments, offset) ?? edited);
      return at(`tool_calls[${k}].arguments`, x.function.arguments, y.function.arguments, cause);
    }
  }
  if ((a.tool_call_id ?? "") !== (b.tool_call_id ?? "")) return at("tool_call_id", a.tool_call_id ?? "", b.tool_call_id ?? "", "random-id");
  if ((a.name ?? "") !== (b.name ?? "")) return at("name", a.name ?? "", b.name ?? "", edited);
  return { cause: edited, message: index };
}

/**
 * json-serialization, a volatile block's cause (git-status, cwd, date, env: volatile-blocks.ts),
 * timestamp or random-id when the changed text is one, else undefined: a
 * date/time (or id) pattern must cover the changed span in both texts. The span runs from the
 * first difference to the start of the common suffix; patterns are matched in a window around it.
 */
function textCause(a: string, b: string, offset: number): PrefixBreakCause | undefined {
  if (sameJson(a, b)) return "json-serialization";
  let suffix = 0;
  const max = Math.min(a.length, b.length) - offset;
  while (suffix < max && a.charCodeAt(a.length - 1 - suffix) === b.charCodeAt(b.length - 1 - suffix)) suffix++;
  const covers = (patterns: RegExp[], s: string, end: number) => coveredBy(patterns, s, offset, end, SNIPPET);
  const endA = a.length - suffix;
  const endB = b.length - suffix;
  const volatile = volatileCause(a, b, offset, endA, endB);
  if (volatile) return volatile;
  if (covers(DATE_TIME, a, endA) && covers(DATE_TIME, b, endB)) return "timestamp";
  if (covers(RANDOM_ID, a, endA) && covers(RANDOM_ID, b, endB)) return "random-id";
  return undefined;
}

function sameJson(a: string, b: string): boolean {
  try {
    return canonicalJson(JSON.parse(a)) === canonicalJson(JSON.parse(b));
  } catch {
    return false;
  }
}

export function firstDiff(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a.charCodeAt(i) === b.charCodeAt(i)) i++;
  return i;
}

function snippets(a: string, b: string, offset: number): { before: string; after: string } {
  return { before: clip(a, offset), after: clip(b, offset) };
}

function clip(s: string, offset: number): string {
  const from = Math.max(0, offset - SNIPPET);
  return (from > 0 ? "…" : "") + s.slice(from, offset + SNIPPET) + (offset + SNIPPET < s.length ? "…" : "");
}

/**
 * The `x-prefix-break` header value: the cause, then `;`-separated details.
 *
 * @example formatBreakHeader({ cause: "timestamp", message: 0, field: "content", offset: 112 }) // "timestamp; message=0; field=content; offset=112"
 */
export function formatBreakHeader(b: PrefixBreak): string {
  const parts: string[] = [b.cause];
  if (b.message !== undefined) parts.push(`message=${b.message}`);
  if (b.field !== undefined) parts.push(`field=${b.field}`);
  if (b.offset !== undefined) parts.push(`offset=${b.offset}`);
  if (b.uncachedFromToken !== undefined) parts.push(`uncached_from_token=${b.uncachedFromToken}`);
  return parts.join("; ");
}
