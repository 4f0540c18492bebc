import type { StructuralTag, StructuralTagFormat, TagFormat } from "@mlc-ai/web-xgrammar";
import { ProtocolError } from "../../protocol/errors";
import type { JsonAnswer, ReplyConstraint, ToolDefinition } from "../../protocol/messages";
import type { ToolCallConvention } from "../tokenizer/tool-call-parser";
import { toolCallMarkers } from "../tokenizer/tool-call-parser";
import { checkedSchema } from "./schema-check";

/** What the grammar engine compiles for one reply. */
export type ReplyGrammar =
  /** The whole reply is one JSON value of `schema`, on one line (", " and ": " separators). */
  | { kind: "json_schema"; schema: string; strictMode: boolean }
  /** Tool calls (and text around them in auto mode) as xgrammar structural tags. */
  | { kind: "structural_tag"; tag: StructuralTag };

export interface ReplyPlan {
  /** Null: the reply is not constrained. */
  grammar: ReplyGrammar | null;
  /** Whether the reply is parsed for tool calls (false under `tool_choice: "none"`). */
  parseToolCalls: boolean;
  /** Marker texts whose tokens are masked out (`tool_choice: "none"`). */
  bannedTexts: string[];
  /** Whether stop strings apply: not inside a reply that is all structure. */
  stopStrings: boolean;
}

/**
 * How each convention writes one call of `name` around its arguments (`begin` + arguments JSON +
 * `end`), the text that triggers a call in auto mode, and what separates parallel calls. The
 * texts are the ones `tool-call-parser.ts` reads back.
 */
function callSyntax(convention: ToolCallConvention, name: string): { begin: string; end: string; trigger: string; separator: string; parallel: boolean } | null {
  const quoted = JSON.stringify(name);
  switch (convention) {
    case "hermes":
      return { begin: `<tool_call>\n{"name": ${quoted}, "arguments": `, end: "}\n</tool_call>", trigger: "<tool_call>", separator: "\n", parallel: true };
    case "phi4-mini":
      return { begin: `<|tool_call|>[{"name": ${quoted}, "arguments": `, end: "}]<|/tool_call|>", trigger: "<|tool_call|>", separator: "", parallel: true };
    case "llama3-json":
      // The whole reply is one call (the parser reads no more than one).
      return { begin: `{"name": ${quoted}, "parameters": `, end: "}", trigger: '{"name": ', separator: "", parallel: false };
    default:
      return null;
  }
}

/**
 * The grammar of a reply under `constraint` (protocol/messages.ts `ReplyConstraint`) for a model
 * whose template writes calls per `convention`, over the turn's `tools`. Checks every schema
 * (`schema-check.ts`) and throws the request's error: `unknown_tool` for a choice the tools
 * cannot meet, `invalid_request` for tool calls the convention cannot constrain (pythonic Gemma 3,
 * a template without tools).
 *
 * @example replyPlan({ type: "tool_calls", choice: "required", parallel: false }, tools, "hermes")
 */
export function replyPlan(constraint: ReplyConstraint | undefined, tools: readonly ToolDefinition[], convention: ToolCallConvention): ReplyPlan {
  const free: ReplyPlan = { grammar: null, parseToolCalls: true, bannedTexts: [], stopStrings: true };
  if (!constraint) return free;
  if (constraint.type !== "tool_calls") return answerPlan(constraint);
  const { choice, parallel, answer } = constraint;
  if (choice === "none") return answer ? { ...answerPlan(answer), parseToolCalls: false } : { ...free, parseToolCalls: false, bannedTexts: toolCallMarkers(convention).slice(0, 1) };
  // A reply that calls no tool is then the answer: with no tools, or none the template can constrain, that is all it can be.
  const otherwise = answer && choice === "auto" ? answerPlan(answer) : free;
  if (tools.length === 0) {
    if (choice === "auto") return otherwise;
    throw new ProtocolError("unknown_tool", `tool_choice: ${typeof choice === "string" ? `"${choice}"` : `names "${choice.name}"`} but the turn has no tools`);
  }
  const chosen = typeof choice === "object" ? tools.filter((t) => t.function.name === choice.name) : tools;
  if (chosen.length === 0) throw new ProtocolError("unknown_tool", `tool_choice: names "${(choice as { name: string }).name}", which is not among the turn's tools (${tools.map((t) => t.function.name).join(", ")})`);
  const syntaxOf = (name: string) => callSyntax(convention, name);
  if (!syntaxOf(chosen[0]!.function.name)) {
    if (choice === "auto") return otherwise;
    throw new ProtocolError("invalid_request", `tool_choice: this model's chat template writes tool calls as "${convention}", which constrained decoding does not support: use tool_choice "auto"`);
  }
  const tags: TagFormat[] = chosen.map((t) => {
    const syntax = syntaxOf(t.function.name)!;
    const schema = checkedSchema(t.function.parameters ?? { type: "object", properties: {} }, { strict: t.function.strict === true, where: `tools[${tools.indexOf(t)}].function.parameters` });
    return { type: "tag", begin: syntax.begin, content: { type: "json_schema", json_schema: schema }, end: syntax.end };
  });
  const syntax = syntaxOf(chosen[0]!.function.name)!;
  const one = typeof choice === "object" || !parallel || !syntax.parallel;
  // With an answer, `auto` is the answer or one call: xgrammar (0.1.27) takes no tag list inside
  // an alternative, and spelling out 1..k calls costs k(k+1)/2 copies of every schema to compile.
  const format: StructuralTagFormat =
    choice !== "auto"
      ? { type: "tags_with_separator", tags, separator: syntax.separator, at_least_one: true, stop_after_first: one }
      : answer
        ? { type: "or", elements: [answerFormat(answer), ...tags] }
        : { type: "triggered_tags", triggers: [syntax.trigger], tags, at_least_one: false, stop_after_first: one };
  return { grammar: { kind: "structural_tag", tag: { type: "structural_tag", format } }, parseToolCalls: true, bannedTexts: [], stopStrings: choice === "auto" && !answer };
}

/** A reply that is all one JSON value (stop strings do not apply inside it). */
function answerPlan(answer: JsonAnswer): ReplyPlan {
  const schema = answer.type === "json_object" ? '{"type": "object"}' : JSON.stringify(checkedSchema(answer.schema, { strict: answer.strict, where: "response_format.json_schema.schema" }));
  return { grammar: { kind: "json_schema", schema, strictMode: answer.type === "json_schema" }, parseToolCalls: true, bannedTexts: [], stopStrings: false };
}

/**
 * The answer as a structural-tag element: what `answerPlan` compiles. Tag elements are compiled
 * in strict mode (grammar-cache.ts), so "any object" says its extra keys are allowed.
 */
function answerFormat(answer: JsonAnswer): StructuralTagFormat {
  const schema = answer.type === "json_object" ? { type: "object", additionalProperties: true } : checkedSchema(answer.schema, { strict: answer.strict, where: "response_format.json_schema.schema" });
  return { type: "json_schema", json_schema: schema };
}
