/** A JSON object found in a larger text, with the raw text of each top-level member's value. */
export interface JsonObjectText {
  /** Index just past the object's closing `}`. */
  end: number;
  /** The parsed object. */
  value: Record<string, unknown>;
  /** Each top-level key's value exactly as written (whitespace and key order kept); the last one wins on duplicates, as in `JSON.parse`. */
  rawMembers: Map<string, string>;
}

/**
 * Reads the JSON object that starts at `text[start]` (a `{`) and ends somewhere in `text`, keeping
 * the raw text of its top-level values. Strings are scanned with their escapes, so braces and
 * brackets inside strings do not count. Returns `undefined` when no valid JSON object starts
 * there (the object is checked with `JSON.parse`); never throws.
 *
 * @example
 * const found = readJsonObjectText('<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', 12);
 * found?.rawMembers.get("arguments"); // '{"a": 1}'
 * found?.end; // 47, the index of "\n</tool_call>"
 */
export function readJsonObjectText(text: string, start: number): JsonObjectText | undefined {
  if (text[start] !== "{") return undefined;
  const rawMembers = new Map<string, string>();
  let i = skipJsonWhitespace(text, start + 1);
  if (text[i] !== "}") {
    for (;;) {
      if (text[i] !== '"') return undefined;
      const keyEnd = skipString(text, i);
      if (keyEnd === undefined) return undefined;
      const key = parseJson(text.slice(i, keyEnd));
      if (typeof key !== "string") return undefined;
      i = skipJsonWhitespace(text, keyEnd);
      if (text[i] !== ":") return undefined;
      const valueStart = skipJsonWhitespace(text, i + 1);
      const valueEnd = skipValue(text, valueStart);
      if (valueEnd === undefined) return undefined;
      rawMembers.set(key, text.slice(valueStart, valueEnd));
      i = skipJsonWhitespace(text, valueEnd);
      if (text[i] === ",") {
        i = skipJsonWhitespace(text, i + 1);
        continue;
      }
      if (text[i] === "}") break;
      return undefined;
    }
  }
  const end = i + 1;
  const value = parseJson(text.slice(start, end));
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  return { end, value: value as Record<string, unknown>, rawMembers };
}

/**
 * Reads the JSON array of objects that starts at `text[start]` (a `[`), keeping each object's raw
 * members (see `readJsonObjectText`). Returns `undefined` when no valid JSON array starts there or
 * an element is not an object; never throws.
 *
 * @example
 * const found = readJsonObjectArrayText('[{"name": "f", "arguments": {"a": 1}}]', 0);
 * found?.items[0]?.rawMembers.get("arguments"); // '{"a": 1}'
 */
export function readJsonObjectArrayText(text: string, start: number): { end: number; items: JsonObjectText[] } | undefined {
  if (text[start] !== "[") return undefined;
  const items: JsonObjectText[] = [];
  let i = skipJsonWhitespace(text, start + 1);
  if (text[i] === "]") return { end: i + 1, items };
  for (;;) {
    const item = readJsonObjectText(text, i);
    if (!item) return undefined;
    items.push(item);
    i = skipJsonWhitespace(text, item.end);
    if (text[i] === "]") return { end: i + 1, items };
    if (text[i] !== ",") return undefined;
    i = skipJsonWhitespace(text, i + 1);
  }
}

/** Sentinel for text that is not JSON (JSON itself can encode `undefined`-free values only). */
const NOT_JSON = Symbol("not-json");

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return NOT_JSON;
  }
}

/**
 * The index of the first character at or after `i` that is not JSON whitespace.
 *
 * @example
 * skipJsonWhitespace("a \n b", 1); // 4
 */
export function skipJsonWhitespace(text: string, i: number): number {
  while (i < text.length && (text[i] === " " || text[i] === "\n" || text[i] === "\r" || text[i] === "\t")) i++;
  return i;
}

/** `text[i]` is `"`; returns the index past the closing quote. */
function skipString(text: string, i: number): number | undefined {
  for (let j = i + 1; j < text.length; j++) {
    const c = text[j];
    if (c === "\\") j++;
    else if (c === '"') return j + 1;
  }
  return undefined;
}

/** Returns the index past the JSON value at `text[i]` (structure only; `JSON.parse` judges validity). */
function skipValue(text: string, i: number): number | undefined {
  const first = text[i];
  if (first === undefined) return undefined;
  if (first === '"') return skipString(text, i);
  if (first === "{" || first === "[") {
    let depth = 0;
    for (let j = i; j < text.length; j++) {
      const c = text[j];
      if (c === '"') {
        const after = skipString(text, j);
        if (after === undefined) return undefined;
        j = after - 1;
      } else if (c === "{" || c === "[") depth++;
      else if (c === "}" || c === "]") {
        depth--;
        if (depth === 0) return j + 1;
      }
    }
    return undefined;
  }
  let j = i;
  while (j < text.length && !",}] \n\r\t".includes(text[j]!)) j++;
  return j === i ? undefined : j;
}
