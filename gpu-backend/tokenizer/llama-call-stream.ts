import { JsonCall } from "./json-call-stream";
import type { ConventionStream, StreamText } from "./reply-delta-builder";

const PYTHON_TAG = "<|python_tag|>";

/**
 * The llama3-json splitter, read as `parseLlama3Json` reads a reply: the whole reply (trimmed,
 * after an optional `<|python_tag|>`) is one call object with a `name` and `parameters` (or
 * `arguments`), and then its content is empty; anything else is all content. The text is held
 * while it may still be a call; the call opens once its name is complete and its arguments
 * member has begun. Text after the object makes the reply content after all (the call may have
 * streamed: see the contract on protocol/messages.ts `ReplyDelta`).
 *
 * @example
 * const stream = new LlamaCallStream(); // fed '{"name": "f", "parameters": {"a": 1}}'
 */
export class LlamaCallStream implements ConventionStream {
  private state: "lead" | "object" | "trail" | "plain" = "lead";
  private call: JsonCall | undefined;
  private cursor = 0;

  run(s: StreamText, final: boolean): void {
    const { text } = s;
    if (this.state === "lead") {
      let i = skipSpace(text, 0);
      if (text.startsWith(PYTHON_TAG, i)) i = skipSpace(text, i + PYTHON_TAG.length);
      else if (i < text.length && PYTHON_TAG.startsWith(text.slice(i))) i = text.length;
      if (i === text.length) this.state = final ? "plain" : "lead";
      else if (text[i] === "{") {
        this.call = new JsonCall(s.out, ["parameters", "arguments"], true);
        this.cursor = i;
        this.state = "object";
      } else this.state = "plain";
    }
    if (this.state === "object") {
      this.cursor = this.call!.scan(text, this.cursor);
      if (this.call!.failed || (final && !this.call!.done)) this.state = "plain";
      else if (this.call!.done) this.state = "trail";
    }
    if (this.state === "trail") {
      this.cursor = skipSpace(text, this.cursor);
      if (this.cursor < text.length) this.state = "plain";
      else if (final) s.pos = text.length;
    }
    if (this.state === "plain") {
      s.out.addContent(text.slice(s.pos));
      s.pos = text.length;
    }
  }
}

/** Skips what `String.prototype.trim` strips (the parser trims the reply). */
function skipSpace(text: string, i: number): number {
  while (i < text.length && /\s/.test(text[i]!)) i++;
  return i;
}
