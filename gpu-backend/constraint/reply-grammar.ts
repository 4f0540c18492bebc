import type { StructuralTag, StructuralTagFormat, TagFormat } from "@mlc-ai/web-xgrammar";
import { ProtocolError } from "../../protocol/errors";
import type { JsonAnswer, ReplyConstraint, ToolDefinition } from "../../protocol/messages";
import type { ToolCallConvention } from "../tokenizer/tool-call-parser";
import { toolCallMarkers } from "../tokenizer/tool-call-parser";
import { checkedSchema } from "./schema-check";

/** What the grammar engine compiles for one reply. */
export type ReplyGrammar =
  /** The whole reply is one JSON value of `schema`, on one line (", " and ": " separators); `where` names it in errors. */
  | { kind: "json_schema"; schema: string; strictMode: boolean; where?: string }
  /** Tool calls (and text around them in auto mode) as xgrammar structural tags; `sources` name their schemas in errors. */
  | { kind: "structural_tag"; tag: StructuralTag; sources?: SchemaSource[] };

/** Where a structural tag's JSON schema comes from: its text (as `JSON.stringify` writes it), its name in errors, and what to do when it does not compile. */
export interface SchemaSource {
  schema: string;
  /** `tools[3] (Bash)`, `response_format.json_schema.schema`. */
  where: string;
  /** True: a schema the grammar engine cannot compile constrains the arguments to any JSON object instead of failing the turn. */
  lenient: boolean;
}

/** What a tool's arguments are constrained to when its schema cannot be used under a lenient `auto`. */
export const ANY_OBJECT: Record<string, unknown> = { type: "object" };

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

/** Whether constrained decoding can write this convention's tool calls (not pythonic Gemma 3, not a template without tools). */
export function constrainsCalls(convention: ToolCallConvention): boolean {
  return callSyntax(convention, "f") !== null;
}

/**
 * The grammar of a reply under `constraint` (protocol/messages.ts `ReplyConstraint`) for a model
 * whose template writes calls per `convention`, over the turn's `tools`. Checks every schema
 * (`schema-check.ts`) and throws the request's error: `unknown_tool` for a choice the tools
 * cannot meet, `invalid_request` for tool calls the convention cannot constrain (pythonic Gemma 3,
 * a template without tools), `invalid_schema` naming the tool (`tools[3] (Bash): ...`) for a
 * schema that is none. Under `auto` the model may answer in free text, so a non-strict tool's
 * schema that cannot be checked (here) or compiled (grammar-cache.ts) fails nothing: a call of
 * that tool is constrained to any JSON object instead.
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
  const sources: SchemaSource[] = [];
  const tags: TagFormat[] = chosen.map((t) => {
    const syntax = syntaxOf(t.function.name)!;
    const where = `tools[${tools.indexOf(t)}] (${t.function.name})`;
    const lenient = choice === "auto" && t.function.strict !== true;
    const schema = toolSchema(t.function.parameters ?? { type: "object", properties: {} }, { strict: t.function.strict === true, where }, lenient);
    sources.push({ schema: JSON.stringify(schema), where, lenient });
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
  if (format.type === "or" && answer?.type === "json_schema") sources.push({ schema: JSON.stringify((format.elements[0] as { json_schema: unknown }).json_schema), where: ANSWER_WHERE, lenient: false });
  return { grammar: { kind: "structural_tag", tag: { type: "structural_tag", format }, sources }, parseToolCalls: true, bannedTexts: [], stopStrings: choice === "auto" && !answer };
}

const ANSWER_WHERE = "response_format.json_schema.schema";

/** A tool's checked schema; under a lenient `auto`, any JSON object when the schema is not a valid one. */
function toolSchema(schema: Record<string, unknown>, o: { strict: boolean; where: string }, lenient: boolean): Record<string, unknown> {
  try {
    return checkedSchema(schema, o);
  } catch (e) {
    if (lenient && e instanceof ProtocolError && e.code === "invalid_schema") return ANY_OBJECT;
    throw e;
  }
}

/** A reply that is all one JSON value (stop strings do not apply inside it). */
function answerPlan(answer: JsonAnswer): ReplyPlan {
  const schema = answer.type === "json_object" ? '{"type": "object"}' : JSON.stringify(checkedSchema(answer.schema, { strict: answer.strict, where: ANSWER_WHERE }));
  return { grammar: { kind: "json_schema", schema, strictMode: answer.type === "json_schema", where: ANSWER_WHERE }, parseToolCalls: true, bannedTexts: [], stopStrings: false };
}

/**
 * The answer as a structural-tag element: what `answerPlan` compiles. Tag elements are compiled
 * in strict mode (grammar-cache.ts), so "any object" says its extra keys are allowed.
 */
function answerFormat(answer: JsonAnswer): StructuralTagFormat {
  const schema = answer.type === "json_object" ? { type: "object", additionalProperties: true } : checkedSchema(answer.schema, { strict: answer.strict, where: ANSWER_WHERE });
  return { type: "json_schema", json_schema: schema };
}
