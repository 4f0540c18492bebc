import { readPythonicCallList } from "./pythonic-call-text";
import type { ConventionStream, StreamText } from "./reply-delta-builder";

const NAME = /^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$/;
const NAME_CHAR = /[A-Za-z0-9_.]/;
const SPACE = /\s/;

type ListState = "name" | "args" | "after" | "end";

interface CallList {
  /** Index of the list's `[`. */
  start: number;
  cursor: number;
  state: ListState;
  /** Calls read whole. */
  calls: number;
  /** The call being read: its name, its index among the reply's calls once opened (-1 before), where its arguments start, how much of its JSON went out. */
  name: string;
  index: number;
  argsStart: number;
  segmentStart: number;
  sent: number;
  depth: number;
  /** The string being read (its closing quotes), or null. */
  quote: string | null;
}

/**
 * The pythonic splitter (Gemma 3), read as `parsePythonic` reads a reply: a call list
 * `[name(key=value, ...), ...]` that starts the reply or follows whitespace, with nothing but
 * whitespace after it, is the reply's calls and the text before it is content. Content goes out
 * as it comes; from a `[` that may begin a call list the text waits. Each call opens when its
 * arguments begin as keyword arguments do (`name(key=`, or `name()`), and its arguments go out as
 * the JSON the parser builds (`readPythonicCallList` over the call so far), one keyword argument
 * at a time as each completes (the last with the `}`, at the call's `)`); the pieces add up to the parser's `arguments`. A list with text after it is not the reply's calls:
 * its text goes to the content and the search goes on after its `[`, as the parser's does (its
 * calls have streamed: see the contract on protocol/messages.ts `ReplyDelta`).
 *
 * @example
 * const stream = new PythonicCallStream(); // fed 'Sure.\n[get_weather(city="Paris", days=3)]'
 * // content "Sure.\n"; get_weather opens at `city=`; arguments '{"city": "Paris"' at the `,`, ', "days": 3}' at the `)`
 */
export class PythonicCallStream implements ConventionStream {
  private list: CallList | undefined;
  /** Where the search for a call list goes on. */
  private look = 0;

  run(s: StreamText, final: boolean): void {
    for (;;) {
      if (!this.list) {
        if (!this.outside(s, final)) return;
        continue;
      }
      const result = this.read(s, this.list, final);
      if (result === "wait") return;
      if (result === "done") {
        s.pos = s.text.length;
        return;
      }
      this.look = this.list.start + 1;
      this.list = undefined;
    }
  }

  /** Content up to a call list (true: one starts at `s.pos`) or up to a `[` that may begin one. */
  private outside(s: StreamText, final: boolean): boolean {
    const { text } = s;
    for (let at = text.indexOf("[", this.look); at !== -1; at = text.indexOf("[", at + 1)) {
      if (at > 0 && !SPACE.test(text[at - 1]!)) continue;
      const begins = beginsCallList(text, at);
      if (begins === "no" || (begins === "maybe" && final)) continue;
      s.out.addContent(text.slice(s.pos, at));
      s.pos = at;
      this.look = at;
      if (begins === "maybe") return false;
      this.list = { start: at, cursor: at + 1, state: "name", calls: 0, name: "", index: -1, argsStart: 0, segmentStart: 0, sent: 0, depth: 0, quote: null };
      return true;
    }
    s.out.addContent(text.slice(s.pos));
    s.pos = text.length;
    this.look = text.length;
    return false;
  }

  private read(s: StreamText, l: CallList, final: boolean): "wait" | "fail" | "done" {
    const { text } = s;
    const more = () => (final ? "fail" : "wait");
    for (;;) {
      if (l.state === "args") {
        const r = this.readArgs(s, l, final);
        if (r !== "next") return r;
        continue;
      }
      if (l.state === "end") {
        if (skipTrailing(text, l.cursor) < text.length) return "fail";
        return final ? "done" : "wait";
      }
      let i = skipSpace(text, l.cursor);
      if (i === text.length) return more();
      if (l.state === "after") {
        if (text[i] !== "," && text[i] !== "]") return "fail";
        l.cursor = i + 1;
        l.state = text[i] === "," ? "name" : "end";
        l.calls++;
        continue;
      }
      // "name": a call `name(`, or the `]` after a trailing comma.
      if (text[i] === "]" && l.calls > 0) {
        l.cursor = i + 1;
        l.state = "end";
        continue;
      }
      const nameStart = i;
      while (i < text.length && NAME_CHAR.test(text[i]!)) i++;
      const name = text.slice(nameStart, i);
      i = skipSpace(text, i);
      if (i === text.length) return more();
      if (text[i] !== "(" || !NAME.test(name)) return "fail";
      l.name = name;
      l.index = -1;
      l.argsStart = l.segmentStart = l.cursor = i + 1;
      l.sent = 0;
      l.state = "args";
    }
  }

  /** Reads a call's arguments; "next" once its `)` is read. */
  private readArgs(s: StreamText, l: CallList, final: boolean): "wait" | "fail" | "next" {
    const { text } = s;
    if (l.index < 0) {
      // The call opens once its arguments begin as keyword arguments do (`key=`) or it closes: `[f(x) here]` is prose.
      const opens = keywordsBegin(text, l.argsStart);
      if (opens === "no" || (opens === "maybe" && final)) return "fail";
      if (opens === "maybe") return "wait";
      l.index = s.out.openCall(l.name);
    }
    let i = l.cursor;
    for (; i < text.length; i++) {
      const c = text[i]!;
      if (l.quote) {
        if (c === "\\") {
          if (i + 1 >= text.length) break;
          i++;
        } else if (text.startsWith(l.quote, i)) {
          i += l.quote.length - 1;
          l.quote = null;
        } else if (l.quote.length === 3 && l.quote.startsWith(text.slice(i)) && !final) break;
        continue;
      }
      if (c === '"' || c === "'") {
        if (i + 2 >= text.length && !final) break;
        l.quote = text.startsWith(c.repeat(3), i) ? c.repeat(3) : c;
        i += l.quote.length - 1;
      } else if (c === "(" || c === "[" || c === "{") l.depth++;
      else if (l.depth > 0 && (c === ")" || c === "]" || c === "}")) l.depth--;
      else if (l.depth === 0 && (c === "," || c === ")")) {
        if (!this.member(s, l, i, c === ")")) return "fail";
        if (c === ")") {
          l.cursor = i + 1;
          l.state = "after";
          return "next";
        }
        l.segmentStart = i + 1;
      }
    }
    l.cursor = i;
    return final ? "fail" : "wait";
  }

  /** A keyword argument ended at `text[at]` (`,` or the call's `)`): sends what it adds to the call's JSON. */
  private member(s: StreamText, l: CallList, at: number, last: boolean): boolean {
    const { text } = s;
    const segment = text.slice(l.segmentStart, at).trim();
    if (segment.length === 0 && !last) return false;
    const parsed = readPythonicCallList(`[${l.name}(${text.slice(l.argsStart, at)})]`, 0);
    const json = parsed?.calls[0]?.arguments;
    if (json === undefined) return false;
    const upTo = last ? json.length : json.length - 1;
    s.out.addArguments(l.index, json.slice(l.sent, upTo));
    l.sent = upTo;
    return true;
  }
}

/** Whether a call's arguments at `from` begin as keyword arguments (`key=`, or the call's `)`), or may once more text comes. */
function keywordsBegin(text: string, from: number): "yes" | "no" | "maybe" {
  let i = skipSpace(text, from);
  if (i === text.length) return "maybe";
  if (text[i] === ")") return "yes";
  if (!/[A-Za-z_]/.test(text[i]!)) return "no";
  while (i < text.length && /[A-Za-z0-9_]/.test(text[i]!)) i++;
  i = skipSpace(text, i);
  if (i + 1 >= text.length) return "maybe";
  return text[i] === "=" && text[i + 1] !== "=" ? "yes" : "no";
}

/** Whether `[` at `at` begins a call list (`[`, a name, `(`, as `PYTHONIC_START` of tool-call-parser.ts), or may once more text comes. */
function beginsCallList(text: string, at: number): "yes" | "no" | "maybe" {
  let i = skipTrailing(text, at + 1);
  if (i === text.length) return "maybe";
  if (!/[A-Za-z_]/.test(text[i]!)) return "no";
  while (i < text.length && NAME_CHAR.test(text[i]!)) i++;
  i = skipTrailing(text, i);
  if (i === text.length) return "maybe";
  return text[i] === "(" ? "yes" : "no";
}

/** Skips the whitespace a call list reads between its tokens (`readPythonicCallList`). */
function skipSpace(text: string, i: number): number {
  while (i < text.length && " \n\r\t".includes(text[i]!)) i++;
  return i;
}

/** Skips what the parser's `\s` and `trimEnd` skip (around the list's start, after its end). */
function skipTrailing(text: string, i: number): number {
  while (i < text.length && SPACE.test(text[i]!)) i++;
  return i;
}
