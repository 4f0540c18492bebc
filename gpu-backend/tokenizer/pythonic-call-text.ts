/** One call of a pythonic call list: the function's name and its keyword arguments as JSON object text. */
export interface PythonicCall {
  name: string;
  /** `{"key": value, ...}` (see `readPythonicCallList` for how values are written). */
  arguments: string;
}

/**
 * Reads the Python list of calls that starts at `text[start]` (a `[`), as Gemma 3's and Llama
 * 3.2's "pythonic" templates teach it: `[get_weather(city="Paris"), get_time(tz="UTC")]`.
 *
 * Accepted: one or more calls `name(key=value, ...)` (a name is an identifier, dots allowed),
 * keyword arguments only, values that are Python or JSON literals: strings ('...', "...",
 * triple-quoted, r-prefixed; Python escapes), numbers, `True`/`False`/`None` and
 * `true`/`false`/`null`, lists, tuples and dicts with string keys; whitespace anywhere between
 * tokens and trailing commas. Anything else (positional arguments, expressions, variables,
 * duplicate keywords) is not a call list: returns `undefined`, never throws.
 *
 * Arguments come back as JSON text written the way Python's `json.dumps(obj, ensure_ascii=False)`
 * writes it (and the Jinja `tojson` filter of Gemma's template renders values): `", "` between
 * members, `": "` after keys, strings with `JSON.stringify` escapes (non-ASCII kept), numbers as
 * the model wrote them when that is JSON (`2.50` stays `2.50`) else normalised (`.5` -> `0.5`),
 * tuples as arrays, `True` -> `true`, `None` -> `null`.
 *
 * @example
 * readPythonicCallList('[get_weather(city="Paris", days=3)]', 0);
 * // { calls: [{ name: "get_weather", arguments: '{"city": "Paris", "days": 3}' }], end: 35 }
 */
export function readPythonicCallList(text: string, start: number): { calls: PythonicCall[]; end: number } | undefined {
  const s: Scan = { text, i: start, depth: 0 };
  if (!eat(s, "[")) return undefined;
  const calls: PythonicCall[] = [];
  for (;;) {
    skipSpace(s);
    if (calls.length > 0 && eat(s, "]")) break;
    const call = readCall(s);
    if (!call) return undefined;
    calls.push(call);
    skipSpace(s);
    if (eat(s, ",")) continue;
    if (eat(s, "]")) break;
    return undefined;
  }
  return { calls, end: s.i };
}

interface Scan {
  readonly text: string;
  i: number;
  depth: number;
}

/** Nesting deeper than this is not a call list (keeps the recursion bounded). */
const MAX_DEPTH = 64;
const IDENTIFIER = /[A-Za-z_][A-Za-z0-9_]*/y;
const NAME = /[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*/y;
const NUMBER = /-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?![A-Za-z0-9_.])/y;
const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;
const KEYWORDS: ReadonlyMap<string, string> = new Map([
  ["True", "true"],
  ["False", "false"],
  ["None", "null"],
  ["true", "true"],
  ["false", "false"],
  ["null", "null"],
]);

function readCall(s: Scan): PythonicCall | undefined {
  const name = match(s, NAME);
  if (name === undefined) return undefined;
  skipSpace(s);
  if (!eat(s, "(")) return undefined;
  const members: string[] = [];
  const seen = new Set<string>();
  for (;;) {
    skipSpace(s);
    if (eat(s, ")")) break;
    const key = match(s, IDENTIFIER);
    if (key === undefined || KEYWORDS.has(key) || seen.has(key)) return undefined;
    seen.add(key);
    skipSpace(s);
    if (!eat(s, "=")) return undefined;
    skipSpace(s);
    const value = readValue(s);
    if (value === undefined) return undefined;
    members.push(`${JSON.stringify(key)}: ${value}`);
    skipSpace(s);
    if (eat(s, ",")) continue;
    if (eat(s, ")")) break;
    return undefined;
  }
  return { name, arguments: `{${members.join(", ")}}` };
}

/** A literal at `s.i`, as JSON text. */
function readValue(s: Scan): string | undefined {
  const c = s.text[s.i];
  if (c === undefined) return undefined;
  if (c === "[" || c === "(") return readSequence(s, c === "[" ? "]" : ")");
  if (c === "{") return readDict(s);
  const number = match(s, NUMBER);
  if (number !== undefined) return jsonNumber(number);
  const string = readString(s);
  if (string !== undefined) return JSON.stringify(string);
  const word = match(s, IDENTIFIER);
  return word === undefined ? undefined : KEYWORDS.get(word);
}

function readSequence(s: Scan, close: "]" | ")"): string | undefined {
  if (++s.depth > MAX_DEPTH) return undefined;
  s.i++;
  const items: string[] = [];
  let trailingComma = false;
  for (;;) {
    skipSpace(s);
    if (eat(s, close)) break;
    const value = readValue(s);
    if (value === undefined) return undefined;
    items.push(value);
    skipSpace(s);
    trailingComma = eat(s, ",");
    if (trailingComma) continue;
    if (eat(s, close)) break;
    return undefined;
  }
  s.depth--;
  // `(x)` is x in Python; `(x,)` and `()` are tuples.
  if (close === ")" && items.length === 1 && !trailingComma) return items[0];
  return `[${items.join(", ")}]`;
}

function readDict(s: Scan): string | undefined {
  if (++s.depth > MAX_DEPTH) return undefined;
  s.i++;
  const members: string[] = [];
  for (;;) {
    skipSpace(s);
    if (eat(s, "}")) break;
    const key = readString(s);
    if (key === undefined) return undefined;
    skipSpace(s);
    if (!eat(s, ":")) return undefined;
    skipSpace(s);
    const value = readValue(s);
    if (value === undefined) return undefined;
    members.push(`${JSON.stringify(key)}: ${value}`);
    skipSpace(s);
    if (eat(s, ",")) continue;
    if (eat(s, "}")) break;
    return undefined;
  }
  s.depth--;
  return `{${members.join(", ")}}`;
}

function jsonNumber(text: string): string | undefined {
  if (JSON_NUMBER.test(text)) return text;
  // Python rejects leading zeros ("01") as JSON does; ".5", "5." and "-.5e3" are fine in Python.
  if (/^-?0\d/.test(text)) return undefined;
  const value = Number(text);
  return Number.isFinite(value) ? JSON.stringify(value) : undefined;
}

/** A Python string literal at `s.i` (optional r/u prefix, single or triple quotes), decoded. */
function readString(s: Scan): string | undefined {
  const { text } = s;
  let i = s.i;
  let raw = false;
  const prefix = text[i];
  if (prefix === "r" || prefix === "R") {
    raw = true;
    i++;
  } else if (prefix === "u" || prefix === "U") i++;
  const quote = text[i];
  if (quote !== '"' && quote !== "'") return undefined;
  const triple = text.startsWith(quote.repeat(3), i);
  const delimiter = triple ? quote.repeat(3) : quote;
  i += delimiter.length;
  let out = "";
  for (;;) {
    if (i >= text.length) return undefined;
    if (text.startsWith(delimiter, i)) {
      s.i = i + delimiter.length;
      return out;
    }
    const c = text[i]!;
    if (c === "\n" && !triple) return undefined;
    if (c !== "\\") {
      out += c;
      i++;
      continue;
    }
    const next = text[i + 1];
    if (next === undefined) return undefined;
    if (raw) {
      out += c + next;
      i += 2;
      continue;
    }
    const escape = readEscape(text, i + 1);
    if (!escape) return undefined;
    out += escape.value;
    i = escape.end;
  }
}

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  "\n": "",
  "\\": "\\",
  "'": "'",
  '"': '"',
  a: "\x07",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
  v: "\v",
};

/** The escape after a backslash at `text[i - 1]`. */
function readEscape(text: string, i: number): { value: string; end: number } | undefined {
  const c = text[i]!;
  const simple = SIMPLE_ESCAPES[c];
  if (simple !== undefined) return { value: simple, end: i + 1 };
  const octal = /[0-7]{1,3}/y;
  octal.lastIndex = i;
  const o = octal.exec(text);
  if (o) return { value: String.fromCharCode(parseInt(o[0], 8)), end: i + o[0].length };
  const width = c === "x" ? 2 : c === "u" ? 4 : c === "U" ? 8 : 0;
  if (width > 0) {
    const hex = text.slice(i + 1, i + 1 + width);
    if (hex.length !== width || !/^[0-9A-Fa-f]+$/.test(hex)) return undefined;
    const code = parseInt(hex, 16);
    if (code > 0x10ffff) return undefined;
    return { value: String.fromCodePoint(code), end: i + 1 + width };
  }
  if (c === "N") return undefined;
  // Python keeps unknown escapes as written.
  return { value: `\\${c}`, end: i + 1 };
}

function match(s: Scan, re: RegExp): string | undefined {
  re.lastIndex = s.i;
  const m = re.exec(s.text);
  if (!m) return undefined;
  s.i += m[0].length;
  return m[0];
}

function eat(s: Scan, c: string): boolean {
  if (s.text[s.i] !== c) return false;
  s.i++;
  return true;
}

function skipSpace(s: Scan): void {
  while (s.i < s.text.length && " \n\r\t".includes(s.text[s.i]!)) s.i++;
}
