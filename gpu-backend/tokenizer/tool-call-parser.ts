import type { AssistantMessage, ToolCall } from "../../protocol/messages";
import { readJsonObjectText, skipJsonWhitespace, type JsonObjectText } from "./json-object-text";

/**
 * How a model writes tool calls in its reply, as its chat template teaches it.
 *
 * - `"hermes"`: Qwen2.5, Qwen3, Hermes: zero or more
 *   `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks, with text around them.
 * - `"llama3-json"`: Llama 3.1/3.2: the whole reply is `{"name": ..., "parameters": {...}}`,
 *   optionally after `<|python_tag|>`.
 * - `"none"`: the template knows no tool calls; the reply is plain text.
 */
export type ToolCallConvention = "hermes" | "llama3-json" | "none";

const TOOL_CALL_OPEN = "<tool_call>";
const TOOL_CALL_CLOSE = "</tool_call>";
const THINK_OPEN = "<think>";
const THINK_CLOSE = "</think>";
const PYTHON_TAG = "<|python_tag|>";

/**
 * Tells a chat template's tool-call convention from its source.
 *
 * @example
 * detectToolCallConvention(checkpoint.chatTemplate); // "hermes" for Qwen3's template
 */
export function detectToolCallConvention(templateSource: string): ToolCallConvention {
  if (templateSource.includes(TOOL_CALL_OPEN)) return "hermes";
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
 *
 * Never throws.
 *
 * @example
 * parseAssistantText('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', "hermes", () => "call_1");
 * // { role: "assistant", content: "Checking.",
 * //   tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }] }
 */
export function parseAssistantText(text: string, convention: ToolCallConvention, makeId: () => string): AssistantMessage {
  const parsed = convention === "hermes" ? parseHermes(text) : convention === "llama3-json" ? parseLlama3Json(text) : undefined;
  if (!parsed || parsed.calls.length === 0) return { role: "assistant", content: text };
  const content = parsed.content.trim();
  return {
    role: "assistant",
    content: content.length > 0 ? content : null,
    tool_calls: parsed.calls.map((call) => ({ id: makeId(), type: "function", function: call })),
  };
}

type ParsedFunction = ToolCall["function"];

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
