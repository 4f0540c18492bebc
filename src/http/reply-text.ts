/** The hermes marker that opens a tool call in the reply's text (the embedded models' convention). */
const TOOL_CALL_OPEN = "<tool_call>";

/**
 * Splits a streamed reply's text into what may go out as text now and what is held back because
 * it is, or may become, a tool call. Every streaming API (chat chunks, Responses events, Messages
 * events) uses this one rule: with tools in the request, text from a `<tool_call>` marker on is
 * held back (it becomes tool calls when the reply is parsed, not text); a tail that is the start
 * of the marker waits for the next token. Without tools everything goes out at once.
 *
 * @example
 * const split = new ReplyTextSplitter(hasTools);
 * for (const t of tokens) { const out = split.push(t); if (out) send(out); }
 * const rest = split.finish(); if (rest) send(rest);
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
    const at = this.text.indexOf(TOOL_CALL_OPEN);
    if (at >= 0) this.held = true;
    // Emit all but a tail that could still grow into the marker.
    const safe = at >= 0 ? at : Math.max(this.emitted, this.text.length - markerPrefixAtEnd(this.text));
    if (safe <= this.emitted) return "";
    const out = this.text.slice(this.emitted, safe);
    this.emitted = safe;
    return out;
  }

  /** At the reply's end: the text still held back that is not a tool call ("" when none). */
  finish(): string {
    if (!this.hasTools || this.held || this.text.length <= this.emitted) return "";
    const out = this.text.slice(this.emitted);
    this.emitted = this.text.length;
    return out;
  }
}

/** The length of the longest proper prefix of the marker that `text` ends with. */
function markerPrefixAtEnd(text: string): number {
  for (let k = Math.min(TOOL_CALL_OPEN.length - 1, text.length); k > 0; k--) if (text.endsWith(TOOL_CALL_OPEN.slice(0, k))) return k;
  return 0;
}
