import { z } from "zod";
import { ProtocolError } from "../../protocol";
import type { ChatMessage, ReplyConstraint, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { DEFAULT_MAX_TOKENS, replyConstraint, toToolDefinition } from "./chat-request";
import { fieldError } from "./field-error";
import { inputItem, inputMessages } from "./responses-items";

const functionTool = z
  .object({
    type: z.literal("function"),
    name: z.string().min(1),
    description: z.string().nullable().optional(),
    parameters: z.record(z.string(), z.unknown()).nullable().optional(),
    strict: z.boolean().nullable().optional(),
  })
  .loose();

const format = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("text") }).loose(),
    z.object({ type: z.literal("json_object") }).loose(),
    z
      .object({
        type: z.literal("json_schema"),
        name: z.string().min(1).max(64),
        description: z.string().optional(),
        schema: z.record(z.string(), z.unknown()),
        strict: z.boolean().nullable().optional(),
      })
      .loose(),
  ],
  { error: 'must be {type: "text"}, {type: "json_object"} or {type: "json_schema", name, schema}' },
);

const body = z
  .object({
    model: z.string().optional(),
    input: z.union([z.string(), z.array(inputItem)]),
    instructions: z.string().nullable().optional(),
    tools: z.array(z.looseObject({ type: z.string() })).optional(),
    tool_choice: z
      .union([z.enum(["auto", "required", "none"]), z.object({ type: z.literal("function"), name: z.string().min(1) }).loose()], {
        error: 'must be "auto", "required", "none" or {type: "function", name}',
      })
      .optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
    text: z.object({ format: format.optional() }).loose().nullable().optional(),
    max_output_tokens: z.number().int().min(1).nullable().optional(),
    temperature: z.number().min(0).max(2).nullable().optional(),
    top_p: z.number().gt(0).max(1).nullable().optional(),
    store: z.boolean().nullable().optional(),
    metadata: z.record(z.string().max(64), z.string().max(512)).nullable().optional(),
    previous_response_id: z.string().min(1).nullable().optional(),
    prompt_cache_key: z.string().min(1).max(256).nullable().optional(),
    stream: z.boolean().nullable().optional(),
    truncation: z.enum(["disabled", "auto"]).nullable().optional(),
    background: z.boolean().nullable().optional(),
    conversation: z.unknown().optional(),
  })
  .loose();

/** A validated `POST /v1/responses` body, as the turn machinery takes it. */
export interface ParsedResponsesRequest {
  model: string | undefined;
  /** The input's messages (without the instructions). */
  messages: ChatMessage[];
  instructions: string | null;
  tools: ToolDefinition[];
  sampling: SamplingParams;
  constraint: ReplyConstraint | undefined;
  stream: boolean;
  store: boolean;
  previousResponseId: string | undefined;
  promptCacheKey: string | undefined;
  /** The fields a response echoes, in the API's shape. */
  echo: Record<string, unknown>;
}

/**
 * Validates an OpenAI Responses API body into the chat transcript's terms: input items as chat
 * messages (`inputMessages`), function tools (`strict` defaults to true, as the API's does),
 * `tool_choice`, `parallel_tool_calls` and `text.format` as the reply constraint (the same rule as
 * chat completions' `response_format`), `max_output_tokens` as the reply budget. A wrong shape is
 * a 400 `invalid_request` naming the field; what is not served (other tool types, background
 * mode, conversations, `truncation: "auto"`) is refused the same way, never ignored.
 *
 * @example parseResponsesBody({ model, input: "hi", instructions: "Be brief." }).messages // [{ role: "user", content: "hi" }]
 */
export function parseResponsesBody(json: unknown): ParsedResponsesRequest {
  const r = body.safeParse(json);
  if (!r.success) throw fieldError(r.error);
  const b = r.data;
  if (b.background) throw new ProtocolError("invalid_request", "background: background responses are not supported");
  if (b.conversation !== undefined && b.conversation !== null) throw new ProtocolError("invalid_request", "conversation: conversations are not supported; chain responses with previous_response_id");
  if (b.truncation === "auto") throw new ProtocolError("invalid_request", 'truncation: only "disabled" is supported (a transcript is never cut silently)');
  const tools = (b.tools ?? []).map((t, i) => {
    if (t.type !== "function") throw new ProtocolError("invalid_request", `tools[${i}].type: "${t.type}" tools are not supported (function tools are)`);
    const f = functionTool.safeParse(t);
    if (!f.success) throw fieldError(f.error, { prefix: `tools[${i}]` });
    return f.data;
  });
  const chatTools = tools.map((t) => ({
    type: "function" as const,
    function: { name: t.name, ...(t.description ? { description: t.description } : {}), ...(t.parameters ? { parameters: t.parameters } : {}), strict: t.strict ?? true },
  }));
  const f = b.text?.format;
  const responseFormat =
    f?.type === "json_schema" ? { type: "json_schema" as const, json_schema: { name: f.name, schema: f.schema, strict: f.strict ?? false } } : f?.type === "json_object" ? { type: "json_object" as const } : undefined;
  const toolChoice = b.tool_choice === undefined ? undefined : typeof b.tool_choice === "string" ? b.tool_choice : { type: "function" as const, function: { name: b.tool_choice.name } };
  const messages = typeof b.input === "string" ? [{ role: "user" as const, content: b.input }] : inputMessages(b.input);
  if (messages.length === 0 && !b.previous_response_id) throw new ProtocolError("invalid_request", "input: must hold at least one item");
  const instructions = b.instructions ?? null;
  const maxTokens = b.max_output_tokens ?? DEFAULT_MAX_TOKENS;
  const store = b.store ?? true;
  return {
    model: b.model,
    messages,
    instructions,
    tools: chatTools.map(toToolDefinition),
    sampling: { maxTokens, temperature: b.temperature ?? 1, topP: b.top_p ?? 1, topK: 0, stop: [], stopTokenIds: [] },
    constraint: replyConstraint({
      tools: chatTools,
      ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
      ...(b.parallel_tool_calls != null ? { parallel_tool_calls: b.parallel_tool_calls } : {}),
      ...(responseFormat ? { response_format: responseFormat } : {}),
    }, false),
    stream: b.stream ?? false,
    store,
    previousResponseId: b.previous_response_id ?? undefined,
    promptCacheKey: b.prompt_cache_key ?? undefined,
    echo: {
      instructions,
      max_output_tokens: b.max_output_tokens ?? null,
      metadata: b.metadata ?? {},
      parallel_tool_calls: b.parallel_tool_calls ?? true,
      previous_response_id: b.previous_response_id ?? null,
      store,
      temperature: b.temperature ?? 1,
      text: { format: f ?? { type: "text" } },
      tool_choice: b.tool_choice ?? "auto",
      tools: tools.map((t) => ({ type: "function", name: t.name, description: t.description ?? null, parameters: t.parameters ?? null, strict: t.strict ?? true })),
      top_p: b.top_p ?? 1,
    },
  };
}
