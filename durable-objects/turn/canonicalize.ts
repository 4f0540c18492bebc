import type { ChatMessage, ToolDefinition } from "../../protocol/messages";
import { compactJsonText } from "./compact-json";

/**
 * Safe canonicalization of a transcript before it is compared, stored and rendered: the repairs
 * that change no meaning but would change the prompt's tokens and so break prefix reuse.
 *
 *   - tool-call ids: the k-th tool call of the transcript (in order) is `call_k` and tool results
 *     answer the canonical id of the call they name. A client that invents fresh random ids for
 *     old calls every turn then sends the same transcript every turn.
 *   - tool-call arguments: canonical JSON (object keys sorted, no whitespace) when they parse as
 *     JSON and re-serialize without changing a value (see `canonicalJsonText`); left alone otherwise.
 *   - tool definitions: canonical JSON (see `canonicalTools`).
 *
 * `repaired.jsonArguments` counts arguments whose text had whitespace to drop: replies go out
 * compacted in the model's key order (`compactJsonText`), so key order alone is not counted.
 *
 * Ids the client sent are kept in `idMap` (client id -> canonical id) so callers can answer in
 * the client's own ids (`restoreIds`).
 *
 * @example
 * const { messages, repaired } = canonicalizeTranscript(incoming);
 */
export interface Canonicalized {
  messages: ChatMessage[];
  /** Client tool-call id -> canonical id, for the ids that differed. */
  idMap: Map<string, string>;
  repaired: Repairs;
}

/**
 * What was repaired in a turn's request: how many things canonicalization changed, by kind, and
 * the client quirks the edge repaired before the transcript was built, by name (`quirks`, e.g.
 * `"billing-header"`: Claude Code's per-session billing line removed from the system prompt,
 * src/http/billing-header.ts; absent when none).
 */
export interface Repairs {
  toolCallIds: number;
  jsonArguments: number;
  quirks?: string[];
}

/**
 * A turn's repairs with its client quirks added: undefined when there is nothing to record.
 *
 * @example withQuirks(undefined, ["billing-header"]) // { toolCallIds: 0, jsonArguments: 0, quirks: ["billing-header"] }
 */
export function withQuirks(repaired: Repairs | undefined, quirks: readonly string[] | undefined): Repairs | undefined {
  if (!quirks || quirks.length === 0) return repaired;
  return { ...(repaired ?? { toolCallIds: 0, jsonArguments: 0 }), quirks: [...new Set(quirks)] };
}

export function canonicalizeTranscript(messages: readonly ChatMessage[]): Canonicalized {
  const idMap = new Map<string, string>();
  const repaired: Repairs = { toolCallIds: 0, jsonArguments: 0 };
  let k = 0;
  const out = messages.map((m) => {
    const c: ChatMessage = { ...m };
    if (m.tool_calls && m.tool_calls.length > 0) {
      c.tool_calls = m.tool_calls.map((call) => {
        const id = `call_${k++}`;
        if (call.id !== id) {
          idMap.set(call.id, id);
          repaired.toolCallIds++;
        } else {
          // A client id reused by a later call names that call from here on (results follow their call).
          idMap.delete(call.id);
        }
        const args = canonicalJsonText(call.function.arguments);
        // Key order alone is no repair: replies go out in the model's key order (compact-json.ts),
        // and a client sending one back unchanged did nothing wrong.
        if (args !== call.function.arguments && compactJsonText(call.function.arguments) !== call.function.arguments) repaired.jsonArguments++;
        return { ...call, id, function: { ...call.function, arguments: args } };
      });
    }
    if (m.tool_call_id !== undefined) {
      const id = idMap.get(m.tool_call_id);
      if (id !== undefined) c.tool_call_id = id;
    }
    return c;
  });
  return { messages: out, idMap, repaired };
}

/** The reply's tool-call ids as the client knows them (inverse of `idMap`; new ids stay). */
export function restoreIds(message: ChatMessage, idMap: ReadonlyMap<string, string>): ChatMessage {
  if (!message.tool_calls || idMap.size === 0) return message;
  const back = new Map([...idMap].map(([client, canonical]) => [canonical, client]));
  return { ...message, tool_calls: message.tool_calls.map((c) => ({ ...c, id: back.get(c.id) ?? c.id })) };
}

/** Tool definitions as canonical JSON (keys sorted at every level). */
export function canonicalToolsJson(tools: readonly ToolDefinition[] | undefined): string {
  return canonicalJson(tools ?? []);
}

/** Tool definitions rebuilt with sorted keys (what the backend renders). */
export function canonicalToolDefinitions(tools: readonly ToolDefinition[]): ToolDefinition[] {
  return JSON.parse(canonicalJson(tools)) as ToolDefinition[];
}

/**
 * JSON text re-serialized canonically, or the text itself when it is not JSON or when
 * re-serializing would rewrite a value: a number not written as JSON.stringify writes it (`1e400`
 * would become `null`, `12345678901234567890` lose digits, `-0` its sign, `1e2` read `100`) or a
 * duplicate key (JSON.parse keeps only the last). Tool-call arguments are the model's or the
 * client's words; canonicalization may reorder and respace them, never rewrite a value.
 */
export function canonicalJsonText(text: string): string {
  let canonical: string;
  try {
    canonical = canonicalJson(JSON.parse(text));
  } catch {
    return text;
  }
  return sameTokens(text, canonical) ? canonical : text;
}

/** A JSON string literal or number literal (in valid JSON, a number never starts inside a string). */
const LITERAL = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;

/**
 * Whether two valid JSON texts hold the same number literals (as text, in any order) and as many
 * string literals: what reordering keys and dropping whitespace keeps, and what a number changed
 * by a double or a member dropped as a duplicate key does not.
 */
function sameTokens(a: string, b: string): boolean {
  const tokens = (t: string) => {
    const numbers: string[] = [];
    let strings = 0;
    for (const [m] of t.matchAll(LITERAL)) {
      if (m.startsWith('"')) strings++;
      else numbers.push(m);
    }
    return { numbers: numbers.sort().join(","), strings };
  };
  const x = tokens(a);
  const y = tokens(b);
  return x.strings === y.strings && x.numbers === y.numbers;
}

/** JSON.stringify with object keys sorted at every level. */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortKeys(value));
}

function sortKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return Object.fromEntries(
      Object.keys(o)
        .sort()
        .map((key) => [key, sortKeys(o[key])]),
    );
  }
  return v;
}
