import type { AssistantMessage, ToolCall } from "../../protocol/messages";
import { readJsonObjectArrayText, readJsonObjectText, skipJsonWhitespace, type JsonObjectText } from "./json-object-text";
import { readPythonicCallList } from "./pythonic-call-text";

/**
 * How a model writes tool calls in its reply, as its chat template teaches it.
 *
 * - `"hermes"`: Qwen2.5, Qwen3, Hermes: zero or more
 *   `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks, with text around them.
 * - `"llama3-json"`: Llama 3.1/3.2: the whole reply is `{"name": ..., "parameters": {...}}`,
 *   optionally after `<|python_tag|>`.
 * - `"pythonic"`: Gemma 3 (and Llama 3.2 / 4 "pythonic" templates): the reply ends with a Python
 *   list of calls `[get_weather(city="Paris"), get_time(tz="UTC")]`, optionally after text.
 * - `"phi4-mini"`: Phi-4-mini: `<|tool_call|>[{"name": ..., "arguments": {...}}, ...]<|/tool_call|>`
 *   blocks (the closing tag may be missing at the end of the reply), with text around them.
 * - `"none"`: the template knows no tool calls; the reply is plain text.
 */
export type ToolCallConvention = "hermes" | "llama3-json" | "pythonic" | "phi4-mini" | "none";

const TOOL_CALL_OPEN = "<tool_call>";
const TOOL_CALL_CLOSE = "</tool_call>";
const THINK_OPEN = "<think>";
const THINK_CLOSE = "</think>";
const PYTHON_TAG = "<|python_tag|>";
const PHI_CALL_OPEN = "<|tool_call|>";
const PHI_CALL_CLOSE = "<|/tool_call|>";
const PHI_TOOLS_OPEN = "<|tool|>";
/** The example call every pythonic template shows the model (`[func_name1(params_name1=params_value1, ...)]`). */
const PYTHONIC_EXAMPLE = "func_name1(";
/** Where a pythonic call list may start: `[`, a name, `(`. */
const PYTHONIC_START = /\[\s*[A-Za-z_][A-Za-z0-9_.]*\s*\(/y;

/**
 * The literal markers a convention writes around its calls (grammars spell them out; `none` and
 * pythonic have none).
 *
 * @example toolCallMarkers("hermes") // ["<tool_call>", "</tool_call>"]
 */
export function toolCallMarkers(convention: ToolCallConvention): string[] {
  switch (convention) {
    case "hermes":
      return [TOOL_CALL_OPEN, TOOL_CALL_CLOSE];
    case "phi4-mini":
      return [PHI_CALL_OPEN, PHI_CALL_CLOSE];
    case "llama3-json":
      return [PYTHON_TAG];
    default:
      return [];
  }
}

/**
 * Tells a chat template's tool-call convention from its source.
 *
 * @example
 * detectToolCallConvention(checkpoint.chatTemplate); // "hermes" for Qwen3's template
 */
export function detectToolCallConvention(templateSource: string): ToolCallConvention {
  if (templateSource.includes(TOOL_CALL_OPEN)) return "hermes";
  if (templateSource.includes(PHI_CALL_OPEN) || templateSource.includes(PHI_TOOLS_OPEN)) return "phi4-mini";
  if (templateSource.includes(PYTHONIC_EXAMPLE)) return "pythonic";
  if (templateSource.includes("parameters") && (templateSource.includes("ipython") || templateSource.includes("python_tag"))) return "llama3-json";
  return "none";
}

/**
 * Parses the text of one assistant reply (stop tokens excluded) into an OpenAI-shaped message.
 *
 * - A reply without tool calls comes back as it was generated: `content` is the text, unchanged
 *   (so re-rendering it with the template gives back the same text).
 * - With tool calls, `content` is the text outside the calls, trimmed, or `null` if that is empty.
 * - `function.arguments` is the arguments' JSON text exactly as the model wrote it (valid JSON;
 *   whitespace and key order kept, so the template re-renders the call byte for byte); when the
 *   model wrote the arguments as a JSON string, that string's value; `"{}"` when absent.
 * - hermes: a `<tool_call>` block whose JSON does not parse, is not followed by `</tool_call>`,
 *   or lacks a non-empty string `name` stays in `content` as plain text. Blocks inside a Qwen3
 *   reasoning section (before the first `</think>`, or after an unclosed leading `<think>`) are
 *   reasoning, not calls; the reasoning stays in `content`.
 * - llama3-json: one call when the whole reply (after an optional `<|python_tag|>`) is one JSON
 *   object with a non-empty string `name` and `parameters` (or `arguments`); else plain content.
 * - pythonic: calls when the reply ends (trailing whitespace aside) with a call list that starts
 *   the reply or follows whitespace (`readPythonicCallList`: keyword arguments, Python or JSON
 *   literals); the text before it is the content. The model writes Python, not JSON, so
 *   `arguments` is JSON text rendered from the literals (`{"city": "Paris", "days": 3}`, the
 *   layout of Python's `json.dumps`); Gemma 3's template renders each argument back as
 *   `key=<tojson(value)>`, so a call written that way (`city="Paris", days=3`, calls joined by
 *   `", "`, text and calls separated by a blank line) re-renders byte for byte; `'Paris'`,
 *   `True` or `2.0` come back as `"Paris"`, `true`, `2`.
 * - phi4-mini: each `<|tool_call|>` followed by a JSON array of call objects (or one object) and
 *   `<|/tool_call|>` (or the end of the reply) is a block of calls; a block with an element that
 *   is not an object with a non-empty string `name` stays in `content`, as do malformed ones.
 *
 * Never throws.
 *
 * @example
 * parseAssistantText('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "hermes", () => "call_1");
 * // { role: "assistant", content: "Checking.",
 * //   tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] }
 */
export function parseAssistantText(text: string, convention: ToolCallConvention, makeId: () => string): AssistantMessage {
  const parsed = parseReply(text, convention);
  if (!parsed || parsed.calls.length === 0) return { role: "assistant", content: text };
  const content = parsed.content.trim();
  return {
    role: "assistant",
    content: content.length > 0 ? content : null,
    tool_calls: parsed.calls.map((call) => ({ id: makeId(), type: "function", function: call })),
  };
}

type ParsedFunction = ToolCall["function"];

function parseReply(text: string, convention: ToolCallConvention): ParsedReply | undefined {
  switch (convention) {
    case "hermes":
      return parseHermes(text);
    case "llama3-json":
      return parseLlama3Json(text);
    case "pythonic":
      return parsePythonic(text);
    case "phi4-mini":
      return parsePhi4Mini(text);
    case "none":
      return undefined;
  }
}

interface ParsedReply {
  /** Text outside the calls, untrimmed. */
  content: string;
  calls: ParsedFunction[];
}

function parseHermes(text: string): ParsedReply {
  const calls: ParsedFunction[] = [];
  let content = "";
  let cursor = 0;
  let open = text.indexOf(TOOL_CALL_OPEN, reasoningEnd(text));
  while (open !== -1) {
    const block = readHermesBlock(text, open);
    if (block) {
      content += text.slice(cursor, open);
      calls.push(block.call);
      cursor = block.end;
    }
    open = text.indexOf(TOOL_CALL_OPEN, block ? block.end : open + TOOL_CALL_OPEN.length);
  }
  return { content: content + text.slice(cursor), calls };
}

/** Where tool calls may start: after the reasoning section of a Qwen3 reply. */
function reasoningEnd(text: string): number {
  const close = text.indexOf(THINK_CLOSE);
  if (close !== -1) return close + THINK_CLOSE.length;
  return text.trimStart().startsWith(THINK_OPEN) ? text.length : 0;
}

/** A well-formed `<tool_call>{json}</tool_call>` at `open`, or undefined. */
function readHermesBlock(text: string, open: number): { call: ParsedFunction; end: number } | undefined {
  const start = skipJsonWhitespace(text, open + TOOL_CALL_OPEN.length);
  const json = readJsonObjectText(text, start);
  if (!json) return undefined;
  const close = skipJsonWhitespace(text, json.end);
  if (!text.startsWith(TOOL_CALL_CLOSE, close)) return undefined;
  const call = functionOf(json, "arguments");
  return call && { call, end: close + TOOL_CALL_CLOSE.length };
}

function parseLlama3Json(text: string): ParsedReply | undefined {
  let body = text.trim();
  if (body.startsWith(PYTHON_TAG)) body = body.slice(PYTHON_TAG.length).trim();
  const json = readJsonObjectText(body, 0);
  if (!json || json.end !== body.length) return undefined;
  if (!json.rawMembers.has("parameters") && !json.rawMembers.has("arguments")) return undefined;
  const call = functionOf(json, json.rawMembers.has("parameters") ? "parameters" : "arguments");
  return call && { content: "", calls: [call] };
}

function functionOf(json: JsonObjectText, argumentsKey: string): ParsedFunction | undefined {
  const name = json.value.name;
  if (typeof name !== "string" || name.length === 0) return undefined;
  const args = json.value[argumentsKey];
  if (args === undefined) return { name, arguments: "{}" };
  if (typeof args === "string") return { name, arguments: args };
  return { name, arguments: json.rawMembers.get(argumentsKey) ?? JSON.stringify(args) };
}

function parsePythonic(text: string): ParsedReply | undefined {
  const end = text.trimEnd().length;
  for (let open = text.indexOf("["); open !== -1 && open < end; open = text.indexOf("[", open + 1)) {
    if (open > 0 && !/\s/.test(text[open - 1]!)) continue;
    PYTHONIC_START.lastIndex = open;
    if (!PYTHONIC_START.test(text)) continue;
    const list = readPythonicCallList(text, open);
    if (list && list.end === end) return { content: text.slice(0, open), calls: list.calls };
  }
  return undefined;
}

function parsePhi4Mini(text: string): ParsedReply {
  const calls: ParsedFunction[] = [];
  let content = "";
  let cursor = 0;
  let open = text.indexOf(PHI_CALL_OPEN);
  while (open !== -1) {
    const block = readPhiBlock(text, open);
    if (block) {
      content += text.slice(cursor, open);
      calls.push(...block.calls);
      cursor = block.end;
    }
    open = text.indexOf(PHI_CALL_OPEN, block ? block.end : open + PHI_CALL_OPEN.length);
  }
  return { content: content + text.slice(cursor), calls };
}

/** A well-formed `<|tool_call|>[{...}, ...]<|/tool_call|>` at `open` (closing tag optional at the end), or undefined. */
function readPhiBlock(text: string, open: number): { calls: ParsedFunction[]; end: number } | undefined {
  const start = skipJsonWhitespace(text, open + PHI_CALL_OPEN.length);
  const array = text[start] === "[" ? readJsonObjectArrayText(text, start) : undefined;
  const single = text[start] === "{" ? readJsonObjectText(text, start) : undefined;
  const items = array ? array.items : single ? [single] : [];
  if (items.length === 0) return undefined;
  const calls: ParsedFunction[] = [];
  for (const item of items) {
    const call = functionOf(item, "arguments");
    if (!call) return undefined;
    calls.push(call);
  }
  const after = skipJsonWhitespace(text, (array ?? single)!.end);
  if (text.startsWith(PHI_CALL_CLOSE, after)) return { calls, end: after + PHI_CALL_CLOSE.length };
  return after === text.length ? { calls, end: after } : undefined;
}
