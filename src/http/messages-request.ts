import { z } from "zod";
import { ProtocolError } from "../../protocol";
import { BILLING_HEADER_REPAIR, withoutBillingHeader } from "./billing-header";
import { cacheControl, MAX_CACHE_BREAKPOINTS, type CacheBreakpoint } from "./cache-control";
import { fieldError } from "./field-error";
import { servedTools } from "./messages-tools";
import { anthropicThinking, thinkingOfAnthropic } from "./thinking";
import type { ChatMessage, ReplyConstraint, SamplingParams, ToolCall, ToolDefinition } from "../../protocol/messages";

export { CACHE_TTL_MS, cachePointsOf, MAX_CACHE_BREAKPOINTS, type CacheBreakpoint } from "./cache-control";

/**
 * Anthropic's Messages API request (`POST /v1/messages`, `.../count_tokens`) as the edge's one
 * transcript model: chat messages, tool definitions, sampling and a reply constraint, which the
 * same turn machinery as chat completions runs. docs/messages-api.md lists what is supported.
 */

export interface ParsedMessagesRequest {
  model: string;
  /**
   * The transcript as chat messages: the system prompt first, tool results as `tool` messages,
   * `system`-role messages of `messages` where they stand.
   */
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  /** `maxTokens` is `max_tokens` as given (the backend clamps it); absent on count_tokens. */
  sampling: SamplingParams;
  /** From `tool_choice` (absent: unconstrained, no tools). */
  constraint: ReplyConstraint | undefined;
  stream: boolean;
  /** Every `cache_control` of the request, in request order (tools, system, messages). */
  cacheBreakpoints: CacheBreakpoint[];
  /** `thinking` as a flag: enabled / adaptive -> true, disabled -> false, absent -> undefined (thinking.ts). */
  thinking: boolean | undefined;
  /** `metadata.user_id` as sent (absent or null: undefined). */
  metadataUserId: string | undefined;
  /** Client quirks repaired before the transcript was built, by name (`"billing-header"`), each once. */
  repairs: string[];
  /** One line per server tool dropped (`tools[3]: "web_search_20250305" is a server tool, ...; dropped`). */
  warnings: string[];
}

/** How a request is parsed for its tenant. */
export interface MessagesParseOptions {
  /** A strict tenant (`STRICT_TENANTS`): server tools are refused instead of dropped. */
  strict?: boolean;
}

/** How text blocks of one message (or the system prompt) are joined into one chat message's text. */
const BLOCK_SEPARATOR = "\n\n";

/**
 * The content block types this edge takes: text, tool_use and tool_result are converted; thinking
 * and redacted_thinking (sent back in assistant messages) are accepted and dropped, since our
 * models produce none. Any other (image, document, ...) is refused, never dropped.
 */
const SUPPORTED_BLOCKS = ["text", "tool_use", "tool_result", "thinking", "redacted_thinking"] as const;

/** The error of a block whose type is not among `supported` (`where`: the place, for the message). */
const blockTypeError = (supported: readonly string[], where: string) => (iss: { input?: unknown }) => {
  const type = typeof iss.input === "object" && iss.input !== null && "type" in iss.input ? (iss.input as { type: unknown }).type : undefined;
  return type === undefined ? "a content block needs a type" : `content block type ${JSON.stringify(type)} is not supported ${where} (supported: ${supported.join(", ")})`;
};

const textBlock = z
  .object({
    type: z.literal("text"),
    text: z.string(),
    cache_control: cacheControl,
    citations: z.array(z.unknown()).max(0, "citations are not supported").nullable().optional(),
  })
  .loose();

const toolUseBlock = z
  .object({ type: z.literal("tool_use"), id: z.string().min(1), name: z.string().min(1), input: z.record(z.string(), z.unknown()), cache_control: cacheControl })
  .loose();

/**
 * A tool search's answer inside a tool_result (Claude Code's ToolSearch over `defer_loading`
 * tools): the tool it makes available. Every tool is rendered here anyway, so it is shown to the
 * model as the line `[tool_reference: <name>]`.
 */
const toolReferenceBlock = z.object({ type: z.literal("tool_reference"), tool_name: z.string().min(1), cache_control: cacheControl }).loose();

const toolResultBlock = z
  .object({
    type: z.literal("tool_result"),
    tool_use_id: z.string().min(1),
    content: z.union([z.string(), z.array(z.discriminatedUnion("type", [textBlock, toolReferenceBlock], { error: blockTypeError(["text", "tool_reference"], "inside a tool_result") }))]).optional(),
    is_error: z.boolean().optional(),
    cache_control: cacheControl,
  })
  .loose();

const thinkingBlock = z.object({ type: z.literal("thinking"), thinking: z.string(), signature: z.string().optional(), cache_control: cacheControl }).loose();
const redactedThinkingBlock = z.object({ type: z.literal("redacted_thinking"), data: z.string(), cache_control: cacheControl }).loose();

const block = z.discriminatedUnion("type", [textBlock, toolUseBlock, toolResultBlock, thinkingBlock, redactedThinkingBlock], { error: blockTypeError(SUPPORTED_BLOCKS, "here") });
type Block = z.infer<typeof block>;

const message = z
  .object({
    role: z.enum(["user", "assistant", "system"], { error: 'must be "user", "assistant" or "system"' }),
    content: z.union([z.string(), z.array(block)], { error: "must be a string or an array of content blocks" }),
  })
  .loose();

const toolChoice = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().optional() }).loose(),
    z.object({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().optional() }).loose(),
    z.object({ type: z.literal("tool"), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() }).loose(),
    z.object({ type: z.literal("none") }).loose(),
  ],
  { error: 'must be {type: "auto"}, {type: "any"}, {type: "tool", name} or {type: "none"}' },
);

const countBody = {
  model: z.string().min(1),
  messages: z.array(message).min(1),
  system: z.union([z.string(), z.array(textBlock)], { error: "must be a string or an array of text blocks" }).optional(),
  tools: z.array(z.looseObject({ type: z.string().nullable().optional() }), { error: "must be an array of tools" }).optional(),
  tool_choice: toolChoice.optional(),
  cache_control: cacheControl,
  thinking: anthropicThinking.nullable().optional(),
  output_config: z
    .object({
      format: z
        .object({ type: z.literal("json_schema", { error: 'only {type: "json_schema", schema} is supported' }), schema: z.record(z.string(), z.unknown()) })
        .loose()
        .nullable()
        .optional(),
    })
    .loose()
    .nullable()
    .optional(),
};

const createBody = z
  .object({
    ...countBody,
    max_tokens: z.number().int().min(1),
    stop_sequences: z.array(z.string().min(1)).optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().gt(0).max(1).optional(),
    top_k: z.number().int().min(0).optional(),
    metadata: z.object({ user_id: z.string().nullable().optional() }).loose().optional(),
    stream: z.boolean().optional(),
  })
  .loose();

const countTokensBody = z.object(countBody).loose();

/**
 * Validates a Messages API body and converts it to the chat transcript. `kind: "count"` is the
 * count_tokens body (no `max_tokens`; sampling fields are ignored). A wrong shape, or content this
 * edge does not support (images, documents, server tools, a final assistant message to continue),
 * answers `invalid_request` naming the field. Fields real clients send that change nothing here
 * (`context_management`, `output_config` without a format, a tool's `defer_loading`, unknown
 * top-level fields) are accepted.
 *
 * The conversion: `system` -> one `system` message; a `system`-role message of `messages` -> a
 * `system` message where it stands; an assistant message's text blocks -> its content, its
 * tool_use blocks -> `tool_calls` (arguments `JSON.stringify(input)`), its thinking and
 * redacted_thinking blocks -> dropped; a user message's tool_result blocks -> `tool` messages
 * (`tool_call_id` = `tool_use_id`, the result's text as is: `is_error` is not shown to the model),
 * then its text blocks -> one `user` message. Text blocks of one message are joined with a blank
 * line. Claude Code's billing line (billing-header.ts) is removed from system text first.
 *
 * @example
 * const parsed = parseMessagesBody({ model: "m", max_tokens: 64, system: "Be brief.", messages: [{ role: "user", content: "Hi" }] }, "create");
 * // parsed.messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }]
 */
export function parseMessagesBody(json: unknown, kind: "create" | "count", options: MessagesParseOptions = {}): ParsedMessagesRequest {
  const result = (kind === "create" ? createBody : countTokensBody).safeParse(json);
  if (!result.success) throw fieldError(result.error, { deepest: true });
  const b = result.data as z.infer<typeof createBody>;
  const breakpoints: CacheBreakpoint[] = [];
  const mark = (cc: z.infer<typeof cacheControl>, at: CacheBreakpoint["at"]) => {
    if (cc) breakpoints.push({ at, ttl: cc.ttl ?? "5m" });
  };
  const repairs = new Set<string>();
  const systemText = (text: string) => {
    const kept = withoutBillingHeader(text);
    if (kept !== text) repairs.add(BILLING_HEADER_REPAIR);
    return kept;
  };

  const served = servedTools(b.tools, options.strict ?? false);
  const tools = served.tools?.map((t): ToolDefinition => {
    mark(t.cache_control, "tools");
    return { type: "function", function: { name: t.name, ...(t.description !== undefined ? { description: t.description } : {}), parameters: t.input_schema, ...(t.strict ? { strict: true } : {}) } };
  });

  const messages: ChatMessage[] = [];
  const system = systemMessage(typeof b.system === "string" ? [{ type: "text", text: b.system }] : (b.system ?? []), "system", systemText);
  if (system) {
    for (const cc of system.marks) mark(cc, messages.length);
    messages.push(system.message);
  }
  // A system message between an assistant's tool calls and their results waits until the results
  // are in (a tool message must follow its call); elsewhere it stands where it was sent.
  let held: NonNullable<ReturnType<typeof systemMessage>>[] = [];
  const flush = () => {
    for (const h of held) {
      for (const cc of h.marks) mark(cc, messages.length);
      messages.push(h.message);
    }
    held = [];
  };
  b.messages.forEach((m, i) => {
    const blocks: Block[] = typeof m.content === "string" ? [{ type: "text", text: m.content }] : m.content;
    if (m.role === "system") {
      const s = systemMessage(blocks, `messages[${i}].content`, systemText);
      if (!s) return;
      const last = messages.at(-1);
      if (held.length > 0 || (last?.role === "assistant" && (last.tool_calls?.length ?? 0) > 0)) held.push(s);
      else {
        for (const cc of s.marks) mark(cc, messages.length);
        messages.push(s.message);
      }
    } else if (m.role === "assistant") {
      flush();
      messages.push(assistantMessage(blocks, i, b.messages, (cc) => mark(cc, messages.length)));
    } else {
      const marks: [z.infer<typeof cacheControl>, number][] = [];
      const outs = userMessages(blocks, i, previousTurn(b.messages, i), (cc, offset) => marks.push([cc, offset]));
      const results = outs.filter((o) => o.role === "tool").length; // tool messages come first
      for (const [cc, offset] of marks) mark(cc, messages.length + (offset >= results ? offset + held.length : offset));
      messages.push(...outs.slice(0, results));
      flush();
      messages.push(...outs.slice(results));
    }
  });
  flush();
  mark(b.cache_control, messages.length - 1); // top-level: the last block (automatic caching)
  if (breakpoints.length > MAX_CACHE_BREAKPOINTS) {
    throw new ProtocolError("invalid_request", `cache_control: at most ${MAX_CACHE_BREAKPOINTS} blocks may carry cache_control, found ${breakpoints.length}`);
  }

  return {
    model: b.model,
    messages,
    tools,
    sampling: {
      ...(kind === "create" ? { maxTokens: b.max_tokens } : {}),
      temperature: b.temperature ?? 1,
      topP: b.top_p ?? 1,
      topK: b.top_k ?? 0,
      stop: b.stop_sequences ?? [],
      stopTokenIds: [],
    },
    constraint: withAnswer(replyConstraint(b.tool_choice, (tools?.length ?? 0) > 0), b.output_config?.format ?? undefined),
    stream: b.stream ?? false,
    cacheBreakpoints: breakpoints,
    thinking: thinkingOfAnthropic(b.thinking ?? undefined),
    metadataUserId: b.metadata?.user_id ?? undefined,
    repairs: [...repairs],
    warnings: served.warnings,
  };
}


/**
 * A system prompt (the `system` param, or a `system`-role message) as one `system` message: its
 * text blocks, each without Claude Code's billing line (`systemText`), joined with a blank line;
 * the `cache_control` of the blocks kept. Undefined when no text remains. Only text blocks may
 * stand in a system prompt (`where` names the place in the refusal).
 */
function systemMessage(blocks: readonly Block[], where: string, systemText: (text: string) => string | null): { message: ChatMessage; marks: z.infer<typeof cacheControl>[] } | undefined {
  const texts: string[] = [];
  const marks: z.infer<typeof cacheControl>[] = [];
  blocks.forEach((blk, j) => {
    if (blk.type !== "text") throw new ProtocolError("invalid_request", `${where}[${j}].type: a system prompt holds only text blocks, not ${JSON.stringify(blk.type)}`);
    const text = systemText(blk.text);
    if (text === null) return; // only the billing line: the block goes, its mark with it
    texts.push(text);
    marks.push(blk.cache_control);
  });
  if (texts.length === 0 || texts.join("") === "") return undefined;
  return { message: { role: "system", content: texts.join(BLOCK_SEPARATOR) }, marks };
}

/** The message before `messages[i]` that a tool_result answers: the nearest earlier user or assistant message (system messages stand aside). */
function previousTurn(messages: readonly z.infer<typeof message>[], i: number): z.infer<typeof message> | undefined {
  for (let k = i - 1; k >= 0; k--) if (messages[k]!.role !== "system") return messages[k];
  return undefined;
}

/**
 * An assistant message: its text blocks as content (null with only tool calls), its tool_use
 * blocks as tool calls; thinking and redacted_thinking blocks dropped.
 */
function assistantMessage(blocks: Block[], i: number, all: readonly z.infer<typeof message>[], mark: (cc: z.infer<typeof cacheControl>) => void): ChatMessage {
  if (all.slice(i + 1).every((m) => m.role === "system")) {
    throw new ProtocolError("invalid_request", `messages[${i}]: a final assistant message (prefill, continued by the model) is not supported`);
  }
  const texts: string[] = [];
  const calls: ToolCall[] = [];
  blocks.forEach((b, j) => {
    if (b.type === "tool_result") throw new ProtocolError("invalid_request", `messages[${i}].content[${j}]: a tool_result block belongs in a user message`);
    if (b.type === "thinking" || b.type === "redacted_thinking") return;
    mark(b.cache_control);
    if (b.type === "text") texts.push(b.text);
    else calls.push({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input) } });
  });
  // No text and no call: an empty reply, stored as "" (a reply of only calls has null content).
  const content = texts.length > 0 ? texts.join(BLOCK_SEPARATOR) : calls.length > 0 ? null : "";
  return { role: "assistant", content, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
}

/**
 * A user message: one `tool` message per tool_result (each must answer a tool_use of the message
 * before, and come before any text), then its text blocks as one `user` message. `mark` gets each
 * cache_control with the offset of the chat message holding it among those returned.
 */
function userMessages(blocks: Block[], i: number, previous: z.infer<typeof message> | undefined, mark: (cc: z.infer<typeof cacheControl>, offset: number) => void): ChatMessage[] {
  const out: ChatMessage[] = [];
  const texts: string[] = [];
  const textMarks: z.infer<typeof cacheControl>[] = [];
  const callIds = new Set(previous?.role === "assistant" && typeof previous.content !== "string" ? previous.content.flatMap((b) => (b.type === "tool_use" ? [b.id] : [])) : []);
  blocks.forEach((b, j) => {
    const at = `messages[${i}].content[${j}]`;
    if (b.type === "tool_use") throw new ProtocolError("invalid_request", `${at}: a tool_use block belongs in an assistant message`);
    if (b.type === "thinking" || b.type === "redacted_thinking") throw new ProtocolError("invalid_request", `${at}: a ${b.type} block belongs in an assistant message`);
    if (b.type === "text") {
      texts.push(b.text);
      textMarks.push(b.cache_control);
      return;
    }
    if (texts.length > 0) throw new ProtocolError("invalid_request", `${at}: tool_result blocks must come before any text in a user message`);
    if (!callIds.has(b.tool_use_id)) {
      throw new ProtocolError("invalid_request", `${at}.tool_use_id: ${JSON.stringify(b.tool_use_id)} answers no tool_use block of the previous message (messages[${i - 1}])`);
    }
    const content = b.content === undefined ? "" : typeof b.content === "string" ? b.content : b.content.map((t) => (t.type === "text" ? t.text : `[tool_reference: ${t.tool_name}]`)).join(BLOCK_SEPARATOR);
    mark(b.cache_control, out.length);
    if (typeof b.content !== "string") for (const t of b.content ?? []) mark(t.cache_control, out.length);
    out.push({ role: "tool", tool_call_id: b.tool_use_id, content });
  });
  if (texts.length > 0) {
    for (const cc of textMarks) mark(cc, out.length);
    out.push({ role: "user", content: texts.join(BLOCK_SEPARATOR) });
  }
  if (out.length === 0) throw new ProtocolError("invalid_request", `messages[${i}].content: a user message needs at least one text or tool_result block`);
  return out;
}

/**
 * `tool_choice` as the reply constraint, as chat completions map theirs: `auto` (the default with
 * tools), `any` -> `required`, `tool` -> that tool, `none`; `disable_parallel_tool_use` -> not
 * `parallel`. Whether the choice fits the tools is the backend's check (`unknown_tool`).
 */
/**
 * `output_config.format` (structured output: `{type: "json_schema", schema}`, enforced exactly as
 * chat's strict `response_format`) on top of the tool constraint: the whole reply without tools
 * (or with `tool_choice: none`), the answer of an `auto` choice, moot when a call is required.
 */
function withAnswer(constraint: ReplyConstraint | undefined, format: { schema: Record<string, unknown> } | undefined): ReplyConstraint | undefined {
  if (!format) return constraint;
  const answer = { type: "json_schema" as const, schema: format.schema, strict: true };
  if (!constraint || constraint.type !== "tool_calls" || constraint.choice === "none") return answer;
  return constraint.choice === "auto" ? { ...constraint, answer } : constraint;
}

function replyConstraint(choice: z.infer<typeof toolChoice> | undefined, hasTools: boolean): ReplyConstraint | undefined {
  if (!hasTools && (choice === undefined || choice.type === "auto" || choice.type === "none")) return undefined;
  const parallel = !(choice && "disable_parallel_tool_use" in choice && choice.disable_parallel_tool_use === true);
  const mapped = choice === undefined || choice.type === "auto" ? "auto" : choice.type === "any" ? "required" : choice.type === "none" ? "none" : { name: choice.name };
  return { type: "tool_calls", choice: mapped, parallel };
}
