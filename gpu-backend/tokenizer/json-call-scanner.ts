/** What one step of a `JsonCallScanner` found. */
export interface JsonCallEvents {
  /** The `name` member's value completed: its JSON text (a call needs a non-empty string). */
  nameJson?: string;
  /** Raw text appended to a non-string arguments value (whitespace and key order kept). */
  argumentsText?: string;
  /** A string arguments value completed: its decoded value (the parser gives the string's value). */
  argumentsString?: string;
}

type Phase = "open" | "key" | "inKey" | "colon" | "value" | "inValue" | "next" | "done" | "failed";

/**
 * Scans one tool-call JSON object (`{"name": ..., "arguments": {...}}`) as its text grows, the way
 * `readJsonObjectText` (json-object-text.ts) reads it whole: strings with their escapes, nesting
 * depth, top-level members. It reports the `name` member's value when it completes and the
 * arguments member's value as it is written: raw text piece by piece for an object (or any
 * non-string value), the decoded value at once for a string. The first key of `argumentsKeys`
 * met is the arguments member. Structure only: a value `JSON.parse` would refuse is not noticed.
 *
 * @example
 * const s = new JsonCallScanner(["arguments"]);
 * s.scan('{"name": "f", "argu', 0, {}); // returns 19; events.nameJson: '"f"'
 * s.scan('{"name": "f", "arguments": {"a": 1}}', 19, events); // returns 36; events.argumentsText: '{"a": 1}'; s.phase: "done"
 */
export class JsonCallScanner {
  phase: Phase = "open";
  /** The key met as the arguments member (undefined until one is). */
  argumentsKey: string | undefined;
  private key = "";
  private keyRaw = "";
  private valueRaw = "";
  private inArguments = false;
  private members = 0;
  private depth = 0;
  private inString = false;
  private escaped = false;

  constructor(private readonly argumentsKeys: readonly string[]) {}

  /** Whether the object ended (`}`) or the text cannot be one. */
  get settled(): boolean {
    return this.phase === "done" || this.phase === "failed";
  }

  /**
   * Scans `text` from `from` (its first character the object's `{` when the scan starts) until
   * the object ends, the text cannot be one, or the text ends. Returns the index it stopped at
   * (past the closing `}` when done); adds what it found to `events`.
   */
  scan(text: string, from: number, events: JsonCallEvents): number {
    let i = from;
    while (i < text.length && !this.settled) {
      if (this.step(text[i]!, events)) i++;
    }
    return i;
  }

  /** One character; false when it must be read again in the phase it moved to. */
  private step(c: string, events: JsonCallEvents): boolean {
    switch (this.phase) {
      case "open":
        this.phase = c === "{" ? "key" : "failed";
        return true;
      case "key":
        if (isSpace(c)) return true;
        if (c === '"') {
          this.keyRaw = c;
          this.phase = "inKey";
        } else this.phase = c === "}" && this.members === 0 ? "done" : "failed";
        return true;
      case "inKey":
        this.keyRaw += c;
        if (this.escaped) this.escaped = false;
        else if (c === "\\") this.escaped = true;
        else if (c === '"') {
          const key = parseJson(this.keyRaw);
          if (typeof key !== "string") this.phase = "failed";
          else {
            this.key = key;
            this.phase = "colon";
          }
        }
        return true;
      case "colon":
        if (!isSpace(c)) this.phase = c === ":" ? "value" : "failed";
        return true;
      case "value":
        if (isSpace(c)) return true;
        if (c === "," || c === "}" || c === "]" || c === ":") {
          this.phase = "failed";
          return true;
        }
        this.inArguments = this.argumentsKey === undefined && this.argumentsKeys.includes(this.key);
        if (this.inArguments) this.argumentsKey = this.key;
        this.valueRaw = "";
        this.depth = 0;
        this.phase = "inValue";
        return false;
      case "inValue":
        return this.valueStep(c, events);
      case "next":
        if (isSpace(c)) return true;
        if (c === ",") this.phase = "key";
        else this.phase = c === "}" ? "done" : "failed";
        return true;
      default:
        return true;
    }
  }

  private valueStep(c: string, events: JsonCallEvents): boolean {
    const first = this.valueRaw.length === 0;
    const isStringValue = this.valueRaw.startsWith('"') || (first && c === '"');
    if (!this.inString && this.depth === 0 && !first && !isStringValue && (isSpace(c) || c === "," || c === "}" || c === "]")) {
      // A scalar ends at the first delimiter, which the next phase reads.
      this.endValue(events);
      return false;
    }
    this.valueRaw += c;
    let ended = false;
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (c === "\\") this.escaped = true;
      else if (c === '"') {
        this.inString = false;
        ended = this.depth === 0;
      }
    } else if (c === '"') this.inString = true;
    else if (c === "{" || c === "[") this.depth++;
    else if (c === "}" || c === "]") {
      this.depth--;
      ended = this.depth === 0;
      if (this.depth < 0) this.phase = "failed";
    }
    if (this.inArguments && !isStringValue) events.argumentsText = (events.argumentsText ?? "") + c;
    if (ended) this.endValue(events);
    return true;
  }

  private endValue(events: JsonCallEvents): void {
    this.members++;
    this.phase = "next";
    if (this.key === "name") events.nameJson ??= this.valueRaw;
    if (this.inArguments && this.valueRaw.startsWith('"')) {
      const value = parseJson(this.valueRaw);
      if (typeof value === "string") events.argumentsString = value;
      else this.phase = "failed";
    }
    this.inArguments = false;
  }
}

function isSpace(c: string): boolean {
  return c === " " || c === "\n" || c === "\r" || c === "\t";
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}
