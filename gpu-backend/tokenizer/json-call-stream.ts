import { JsonCallScanner, type JsonCallEvents } from "./json-call-scanner";
import type { ConventionStream, ReplyDeltaBuilder, StreamText } from "./reply-delta-builder";

/**
 * One tool-call JSON object streamed as it is written: the call opens (id and name) as soon as its
 * `name` is a complete non-empty string (and, with `needsArguments`, its arguments member has
 * begun), then its arguments go out as they come; arguments written before the name wait for it.
 * A call whose object ends without arguments gets `"{}"`, as the parser gives it.
 *
 * @example
 * const call = new JsonCall(out, ["arguments"], false);
 * call.scan('{"name": "f", "arguments": {"a": 1}}', 0); // out: { index: 0, id, name: "f", arguments: '{"a": 1}' }
 */
export class JsonCall {
  private readonly scanner: JsonCallScanner;
  private name: string | undefined;
  private held = "";
  private index: number | undefined;

  constructor(
    private readonly out: ReplyDeltaBuilder,
    argumentsKeys: readonly string[],
    private readonly needsArguments: boolean,
  ) {
    this.scanner = new JsonCallScanner(argumentsKeys);
  }

  /** The object ended as a call. */
  get done(): boolean {
    return this.scanner.phase === "done" && this.index !== undefined;
  }

  /** The text is no call: not an object, or one without a name (or arguments, when needed). */
  get failed(): boolean {
    return this.scanner.phase === "failed" || (this.scanner.phase === "done" && this.index === undefined);
  }

  /** Scans `text` from `from` (the object's `{` first); returns where it stopped (past the `}` once done). */
  scan(text: string, from: number): number {
    const events: JsonCallEvents = {};
    const end = this.scanner.scan(text, from, events);
    if (events.nameJson !== undefined && this.name === undefined) {
      const name = parse(events.nameJson);
      if (typeof name === "string" && name.length > 0) this.name = name;
    }
    this.addArguments(events.argumentsText ?? "");
    this.addArguments(events.argumentsString ?? "");
    if (this.index === undefined && this.name !== undefined && (!this.needsArguments || this.scanner.argumentsKey !== undefined)) {
      this.index = this.out.openCall(this.name);
      this.out.addArguments(this.index, this.held);
      this.held = "";
    }
    if (this.scanner.phase === "done" && this.index !== undefined && this.scanner.argumentsKey === undefined) this.out.addArguments(this.index, "{}");
    return end;
  }

  private addArguments(text: string): void {
    if (this.index === undefined) this.held += text;
    else this.out.addArguments(this.index, text);
  }
}

function parse(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/** How a convention marks its blocks of calls (hermes, phi4-mini). */
export interface BlockMarkers {
  open: string;
  close: string;
  /** A block may hold a JSON array of calls (phi4-mini). */
  arrays: boolean;
  /** The closing marker may be missing at the end of the reply (phi4-mini). */
  closeOptionalAtEnd: boolean;
  /** Calls inside a Qwen3 reasoning section are not calls (hermes). */
  reasoning: boolean;
  /**
   * The prompt opened the reasoning section (it ends with `<think>`): until a `</think>` comes,
   * a block waits, since the parser takes it for reasoning if one comes and for a call if none does.
   */
  reasoningOpen?: boolean;
}

type BlockState = "open" | "item" | "object" | "between" | "close";

interface Block {
  start: number;
  cursor: number;
  state: BlockState;
  call?: JsonCall;
}

const THINK_OPEN = "<think>";
const THINK_CLOSE = "</think>";

/**
 * The splitter of conventions that mark blocks of calls with tags (`<tool_call>` for hermes,
 * `<|tool_call|>` for phi4-mini), read as `parseHermes` / `parsePhi4Mini` read them: text
 * outside blocks is content (a tail that may begin a marker waits), a block's text is held while
 * it may still be a call, and a block that turns out not to be one gives its opening marker back
 * to the content, its text read again after it (as the parser searches on past it).
 *
 * @example
 * const stream = new MarkedCallStream({ open: "<tool_call>", close: "</tool_call>", arrays: false, closeOptionalAtEnd: false, reasoning: true });
 */
export class MarkedCallStream implements ConventionStream {
  private block: Block | undefined;
  private thinkEnd = -1;
  private thinkSearched = 0;

  constructor(private readonly m: BlockMarkers) {}

  run(s: StreamText, final: boolean): void {
    for (;;) {
      const b = this.block;
      if (!b) {
        if (!this.outside(s, final)) return;
        continue;
      }
      const result = this.inBlock(s, b, final);
      if (result === "wait") return;
      this.block = undefined;
      if (result === "fail") {
        s.out.addContent(this.m.open);
        s.pos = b.start + this.m.open.length;
      } else s.pos = b.cursor;
    }
  }

  /** Content up to the next block (true: one starts at `s.pos`) or as far as is safe. */
  private outside(s: StreamText, final: boolean): boolean {
    const { text } = s;
    const from = Math.max(s.pos, this.callsFrom(text));
    if (from > text.length) {
      s.out.addContent(text.slice(s.pos));
      s.pos = text.length;
      return false;
    }
    const at = text.indexOf(this.m.open, from);
    if (at >= 0) {
      s.out.addContent(text.slice(s.pos, at));
      s.pos = at;
      if (this.m.reasoningOpen && this.thinkEnd < 0 && !final) return false;
      this.block = { start: at, cursor: at + this.m.open.length, state: "open" };
      return true;
    }
    const safe = final ? text.length : Math.max(s.pos, text.length - partialMarker(text, this.m.open, from));
    s.out.addContent(text.slice(s.pos, safe));
    s.pos = safe;
    return false;
  }

  /** Where calls may start (`reasoningEnd` of tool-call-parser.ts over the text so far); past the end while reasoning. */
  private callsFrom(text: string): number {
    if (!this.m.reasoning) return 0;
    if (this.thinkEnd < 0) {
      const at = text.indexOf(THINK_CLOSE, Math.max(0, this.thinkSearched - THINK_CLOSE.length));
      this.thinkSearched = text.length;
      if (at >= 0) this.thinkEnd = at + THINK_CLOSE.length;
    }
    if (this.thinkEnd >= 0) return this.thinkEnd;
    return text.trimStart().startsWith(THINK_OPEN) ? Infinity : 0;
  }

  private inBlock(s: StreamText, b: Block, final: boolean): "wait" | "fail" | "done" {
    const { text } = s;
    for (;;) {
      if (b.state === "object") {
        b.cursor = b.call!.scan(text, b.cursor);
        if (b.call!.failed) return "fail";
        if (!b.call!.done) return final ? "fail" : "wait";
        b.state = this.inArray(text, b) ? "between" : "close";
        continue;
      }
      b.cursor = skipSpace(text, b.cursor);
      if (b.cursor === text.length && (b.state !== "close" || !final)) return final ? "fail" : "wait";
      const c = text[b.cursor];
      if (b.state === "open" || b.state === "item") {
        if (c === "{") {
          b.call = new JsonCall(s.out, ["arguments"], false);
          b.state = "object";
        } else if (c === "[" && b.state === "open" && this.m.arrays) {
          b.cursor++;
          b.state = "item";
        } else return "fail";
      } else if (b.state === "between") {
        if (c !== "," && c !== "]") return "fail";
        b.cursor++;
        b.state = c === "," ? "item" : "close";
      } else {
        const rest = text.slice(b.cursor, b.cursor + this.m.close.length);
        if (rest === this.m.close) {
          b.cursor += this.m.close.length;
          return "done";
        }
        if (final) return this.m.closeOptionalAtEnd && b.cursor === text.length ? "done" : "fail";
        return this.m.close.startsWith(rest) ? "wait" : "fail";
      }
    }
  }

  /** Whether the block's calls are an array (its first non-space character after the marker is `[`). */
  private inArray(text: string, b: Block): boolean {
    return text[skipSpace(text, b.start + this.m.open.length)] === "[";
  }
}

/** The length of the longest tail of `text` (from `from` on) that begins `marker` without completing it. */
export function partialMarker(text: string, marker: string, from: number): number {
  for (let n = Math.min(marker.length - 1, text.length - from); n > 0; n--) {
    if (text.endsWith(marker.slice(0, n))) return n;
  }
  return 0;
}

function skipSpace(text: string, i: number): number {
  while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\r" || text[i] === "\t")) i++;
  return i;
}
