/**
 * The model's tool-call arguments as clients see them: compacted, one piece at a time. Whitespace
 * outside JSON strings is dropped, keys keep the model's order, and no value is ever rewritten:
 * a run of whitespace between two characters that are neither punctuation (`{}[]:,`) is kept (in
 * valid JSON there is none, so valid JSON comes out as `JSON.stringify` would write it in the
 * model's key order), and text that does not open as a JSON object or array (`{`, `[`) passes
 * through unchanged. Pieces give the same text as the whole: whitespace waits for the character
 * after it, and trailing whitespace never goes out.
 *
 * The stored transcript keeps canonical arguments (sorted keys, `canonicalJsonText`); a client
 * that sends a reply back compacted sends the same canonical arguments once canonicalized.
 *
 * @example
 * const c = new JsonCompactor();
 * c.push('{ "b": 1, ') + c.push('"a": "x y" }') // '{"b":1,"a":"x y"}'
 */
export class JsonCompactor {
  /** Undecided until the first visible character; then compacting or passing through. */
  private mode: "start" | "compact" | "raw" = "start";
  private inString = false;
  private escaped = false;
  /** Whitespace outside strings not yet decided on (kept only between two non-punctuation characters). */
  private pending = "";
  /** The last character that went out outside whitespace ("" at the start). */
  private last = "";

  /** Adds a piece of the arguments; answers what goes out now ("" when nothing). */
  push(piece: string): string {
    let out = "";
    for (const ch of piece) {
      if (this.mode === "raw") {
        out += ch;
        continue;
      }
      if (this.mode === "start") {
        if (isSpace(ch)) {
          this.pending += ch;
          continue;
        }
        this.mode = ch === "{" || ch === "[" ? "compact" : "raw";
        if (this.mode === "raw") {
          out += this.pending + ch;
          this.pending = "";
          continue;
        }
        this.pending = "";
      }
      if (this.inString) {
        out += ch;
        if (this.escaped) this.escaped = false;
        else if (ch === "\\") this.escaped = true;
        else if (ch === '"') this.inString = false;
        this.last = ch;
        continue;
      }
      if (isSpace(ch)) {
        this.pending += ch;
        continue;
      }
      if (this.pending && !PUNCTUATION.has(ch) && !PUNCTUATION.has(this.last)) out += this.pending;
      this.pending = "";
      if (ch === '"') this.inString = true;
      out += ch;
      this.last = ch;
    }
    return out;
  }
}

/**
 * A whole argument text compacted (`JsonCompactor` on one piece).
 *
 * @example compactJsonText('{ "path" : "/a b" }') // '{"path":"/a b"}'
 */
export function compactJsonText(text: string): string {
  return new JsonCompactor().push(text);
}

const PUNCTUATION = new Set(["{", "}", "[", "]", ":", ","]);

/** JSON's whitespace (space, tab, line feed, carriage return). */
function isSpace(ch: string): boolean {
  return ch === " " || ch === "\t" || ch === "\n" || ch === "\r";
}
