/**
 * Where the model conventions the backends parse (gpu-backend/tokenizer/tool-call-parser.ts) open
 * a tool call in the reply's text: hermes (Qwen, Hermes), phi4-mini, and Llama 3's python tag.
 */
const CALL_MARKERS = ["<tool_call>", "<|tool_call|>", "<|python_tag|>"] as const;
/** Llama 3's JSON calls and pythonic call lists are the whole reply: `{"name": ...` or `[f(...)]`. */
const WHOLE_REPLY_CALL_START = /^\s*[{[]/;

/**
 * Splits a streamed reply's text into what may go out as text now and what is held back because
 * it is, or may become, a tool call. Every streaming API (chat chunks, Responses events, Messages
 * events) uses this one rule. With tools in the request, text from a call marker on is held back,
 * and so is a reply that opens with `{` or `[` (a whole-reply JSON or pythonic call); a tail that
 * is the start of a marker waits for the next token. At the end, held text goes out after all when
 * the parsed reply has no tool calls (so the streamed text always equals the reply's content).
 * Without tools everything goes out at once.
 *
 * @example
 * const split = new ReplyTextSplitter(hasTools);
 * for (const t of tokens) { const out = split.push(t); if (out) send(out); }
 * const rest = split.finish(reply.tool_calls !== undefined); if (rest) send(rest);
 */
export class ReplyTextSplitter {
  private text = "";
  private emitted = 0;
  private held = false;

  constructor(private readonly hasTools: boolean) {}

  /** Adds a token's text; answers the text that may go out now ("" when none). */
  push(token: string): string {
    if (!this.hasTools) return token;
    this.text += token;
    if (this.held) return "";
    if (this.emitted === 0 && WHOLE_REPLY_CALL_START.test(this.text)) {
      this.held = true;
      return "";
    }
    const at = firstMarker(this.text);
    if (at >= 0) this.held = true;
    // Emit all but a tail that could still grow into a marker (or, before any visible text, all of
    // it: the reply may still open as a whole-reply call).
    const safe = at >= 0 ? at : this.text.trim() === "" ? 0 : Math.max(this.emitted, this.text.length - markerPrefixAtEnd(this.text));
    if (safe <= this.emitted) return "";
    const out = this.text.slice(this.emitted, safe);
    this.emitted = safe;
    return out;
  }

  /** At the reply's end: the text still held back, unless the reply turned out to hold tool calls ("" when none). */
  finish(hasCalls: boolean): string {
    if (!this.hasTools || hasCalls || this.text.length <= this.emitted) return "";
    const out = this.text.slice(this.emitted);
    this.emitted = this.text.length;
    return out;
  }
}

function firstMarker(text: string): number {
  let first = -1;
  for (const m of CALL_MARKERS) {
    const at = text.indexOf(m);
    if (at >= 0 && (first < 0 || at < first)) first = at;
  }
  return first;
}

/** The length of the longest proper prefix of a marker that `text` ends with. */
function markerPrefixAtEnd(text: string): number {
  let best = 0;
  for (const m of CALL_MARKERS) {
    for (let k = Math.min(m.length - 1, text.length); k > best; k--) {
      if (text.endsWith(m.slice(0, k))) {
        best = k;
        break;
      }
    }
  }
  return best;
}
