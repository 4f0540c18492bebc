import { z } from "zod";
import { ProtocolError } from "../../protocol";
import { fieldError } from "./field-error";
import { anthropicThinking, reasoningEffort, thinkingOfAnthropic, thinkingOfEffort } from "./thinking";
import { MAX_TOP_LOGPROBS, type ChatMessage, type JsonAnswer, type ReplyConstraint, type SamplingParams, type ToolDefinition } from "../../protocol/messages";

const contentPart = z.object({ type: z.literal("text"), text: z.string() }).loose();
const content = z.union([z.string(), z.null(), z.array(contentPart)], { error: 'must be a string, null or an array of text parts ({type: "text", text}); images and other parts are not supported' });

const toolCall = z
  .object({
    id: z.string().min(1),
    type: z.literal("function").default("function"),
    function: z.object({ name: z.string().min(1), arguments: z.string() }).loose(),
  })
  .loose();

const message = z
  .object({
    role: z.enum(["system", "developer", "user", "assistant", "tool"]),
    content: content.optional(),
    tool_calls: z.array(toolCall).optional(),
    tool_call_id: z.string().optional(),
    name: z.string().optional(),
  })
  .loose();

const tool = z
  .object({
    type: z.literal("function"),
    function: z
      .object({ name: z.string().min(1), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullable().optional() })
      .loose(),
  })
  .loose();

/** A tool as chat completions send it (`{type: "function", function: {...}}`). */
export type ChatTool = z.infer<typeof tool>;

const TOP_LOGPROBS_RANGE = `must be an integer in [0, ${MAX_TOP_LOGPROBS}]`;

/**
 * Sampling and reply fields. Clients (OpenCode's AI SDK, Qwen Code) send `null` for fields they
 * leave unset, so each of these takes `null` as absent.
 */
const sampling = {
  max_tokens: z.number().int().min(1).nullish(),
  max_completion_tokens: z.number().int().min(1).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().min(0).nullish(),
  seed: z.number().int().nullish(),
  stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(4)]).nullish(),
  n: z.literal(1).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).loose().nullable().optional(),
  tool_choice: z
    .union([z.enum(["auto", "required", "none"]), z.object({ type: z.literal("function"), function: z.object({ name: z.string().min(1) }).loose() }).loose()], {
      error: 'must be "auto", "required", "none" or {type: "function", function: {name}}',
    })
    .nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  response_format: z
    .discriminatedUnion(
      "type",
      [
        z.object({ type: z.literal("text") }).loose(),
        z.object({ type: z.literal("json_object") }).loose(),
        z
          .object({
            type: z.literal("json_schema"),
            json_schema: z.object({ name: z.string().min(1).max(64), description: z.string().optional(), schema: z.record(z.string(), z.unknown()).optional(), strict: z.boolean().nullable().optional() }).loose(),
          })
          .loose(),
      ],
      { error: 'must be {type: "text"}, {type: "json_object"} or {type: "json_schema", json_schema: {name, schema}}' },
    )
    .nullish(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: z.number().int(TOP_LOGPROBS_RANGE).min(0, TOP_LOGPROBS_RANGE).max(MAX_TOP_LOGPROBS, TOP_LOGPROBS_RANGE).nullable().optional(),
  // Thinking, in the ways clients ask for it (thinking.ts; the first present wins, in this order).
  chat_template_kwargs: z.object({ enable_thinking: z.boolean().nullish() }).loose().nullish(),
  enable_thinking: z.boolean().nullish(),
  thinking: anthropicThinking.nullish(),
  reasoning_effort: reasoningEffort.nullish(),
};

const chatBody = z
  .object({
    model: z.string().optional(),
    messages: z.array(message).min(1),
    tools: z.array(tool).optional(),
    prompt_cache_key: z.string().min(1).max(256).optional(),
    ...sampling,
  })
  .loose();

const appendBody = z
  .object({
    messages: z.array(message).min(1),
    tools: z.array(tool).optional(),
    model: z.string().optional(),
    ...sampling,
  })
  .loose();

export interface ParsedTurn {
  model: string | undefined;
  messages: ChatMessage[];
  tools: ToolDefinition[] | undefined;
  sampling: SamplingParams;
  stream: boolean;
  includeUsage: boolean;
  promptCacheKey: string | undefined;
  /** Structured outputs (tool_choice, response_format); absent: unconstrained. */
  constraint: ReplyConstraint | undefined;
  /**
   * Whether the client asked the model to think (thinking.ts): `chat_template_kwargs.enable_thinking`,
   * else `enable_thinking`, else Anthropic-style `thinking`, else `reasoning_effort` ("none" -> false);
   * undefined when it said nothing.
   */
  thinking: boolean | undefined;
}

/**
 * Validates an OpenAI chat-completions body (or an append turn's, `kind: "append"`) into the turn the
 * Durable Object runs. Wrong shapes answer `invalid_request` naming the field. `logprobs: true`
 * becomes `sampling.logprobs` (= `top_logprobs`, default 0); `top_logprobs` outside 0..20 or
 * without `logprobs: true` is `invalid_request` ("top_logprobs: ...").
 *
 * @example parseChatBody(await c.req.json(), "chat")
 */
export function parseChatBody(json: unknown, kind: "chat" | "append"): ParsedTurn {
  const result = (kind === "chat" ? chatBody : appendBody).safeParse(json);
  if (!result.success) throw fieldError(result.error);
  const b = result.data;
  const topLogprobs = b.top_logprobs ?? undefined;
  if (topLogprobs !== undefined && b.logprobs !== true) throw new ProtocolError("invalid_request", "top_logprobs: requires logprobs: true");
  const stop = b.stop == null ? [] : typeof b.stop === "string" ? [b.stop] : b.stop;
  const maxTokens = b.max_completion_tokens ?? b.max_tokens ?? undefined;
  return {
    model: b.model,
    messages: b.messages.map(toChatMessage),
    tools: b.tools?.map(toToolDefinition),
    sampling: {
      ...(maxTokens !== undefined ? { maxTokens } : {}),
      temperature: b.temperature ?? 1,
      topP: b.top_p ?? 1,
      topK: b.top_k ?? 0,
      stop,
      stopTokenIds: [],
      ...(b.seed != null ? { seed: b.seed >>> 0 } : {}),
      ...(b.logprobs === true ? { logprobs: topLogprobs ?? 0 } : {}),
    },
    stream: b.stream ?? false,
    includeUsage: b.stream_options?.include_usage ?? false,
    promptCacheKey: "prompt_cache_key" in b ? (b.prompt_cache_key as string | undefined) : undefined,
    constraint: replyConstraint(b, kind === "append" && b.tools === undefined),
    thinking: b.chat_template_kwargs?.enable_thinking ?? b.enable_thinking ?? thinkingOfAnthropic(b.thinking ?? undefined) ?? thinkingOfEffort(b.reasoning_effort),
  };
}

export function toToolDefinition(t: ChatTool): ToolDefinition {
  const { name, description, parameters, strict } = t.function;
  return {
    type: "function",
    function: { name, ...(description !== undefined ? { description } : {}), ...(parameters !== undefined ? { parameters } : {}), ...(strict ? { strict: true } : {}) },
  };
}

/**
 * The reply constraint a body asks for. `tool_choice` governs when tools may be called (default
 * "auto", as OpenAI's); `response_format` json_object / json_schema is what a reply that calls no
 * tool must be: the whole reply when no tool may be called (no tools, or `tool_choice: "none"`),
 * the `answer` of an `"auto"` choice (calls or that JSON, never free text), and moot under
 * `"required"` or a named tool (a call it must be). Whether the choice fits the tools
 * (`unknown_tool`) is the backend's check (`gpu-backend/constraint/reply-grammar.ts`), since a
 * trajectory-URL turn without `tools` (`toolsKept`) keeps the trajectory's, which only the backend sees.
 */
export function replyConstraint(
  b: { tools?: ChatTool[]; tool_choice?: z.infer<typeof sampling.tool_choice>; parallel_tool_calls?: boolean | null; response_format?: z.infer<typeof sampling.response_format> },
  toolsKept: boolean,
): ReplyConstraint | undefined {
  const tools = b.tools ?? [];
  const choice = b.tool_choice == null ? undefined : typeof b.tool_choice === "string" ? b.tool_choice : { name: b.tool_choice.function.name };
  const format = b.response_format?.type === "json_object" ? ({ type: "json_object" } as const) : b.response_format?.type === "json_schema" ? jsonSchemaConstraint(b.response_format.json_schema) : undefined;
  const free = choice === undefined || choice === "auto" || choice === "none";
  if (format && (choice === "none" || (tools.length === 0 && !toolsKept && free))) return format;
  if (tools.length === 0 && !toolsKept && free) return undefined;
  const parallel = b.parallel_tool_calls ?? true;
  if (format && (choice ?? "auto") === "auto") return { type: "tool_calls", choice: "auto", parallel, answer: format };
  return { type: "tool_calls", choice: choice ?? "auto", parallel };
}

function jsonSchemaConstraint(s: { schema?: Record<string, unknown>; strict?: boolean | null }): JsonAnswer {
  return { type: "json_schema", schema: s.schema ?? {}, strict: s.strict === true };
}

function toChatMessage(m: z.infer<typeof message>): ChatMessage {
  const text = Array.isArray(m.content) ? m.content.map((p) => p.text).join("") : (m.content ?? null);
  const out: ChatMessage = { role: m.role === "developer" ? "system" : m.role, content: text };
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: "function", function: { name: c.function.name, arguments: c.function.arguments } }));
  }
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  return out;
}
