import { z } from "zod";
import { ProtocolError } from "../../protocol";
import type { ChatMessage, ReplyConstraint, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { replyConstraint, toToolDefinition } from "./chat-request";
import { fieldError } from "./field-error";
import { additionalTools, inputItem, inputMessages } from "./responses-items";
import { mergeTools, responsesTools, type NamespacedTool } from "./responses-tools";
import { reasoningEffort, thinkingOfEffort } from "./thinking";

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
    // Accepted, no effect: Codex sends `include: ["reasoning.encrypted_content"]` with `store: false`.
    include: z.array(z.string()).nullable().optional(),
    reasoning: z.object({ effort: reasoningEffort.nullish() }).loose().nullable().optional(),
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
  /** `reasoning.effort` as a flag ("none" -> false, any other -> true; absent: undefined; thinking.ts). */
  thinking: boolean | undefined;
  /**
   * Flat tool name -> Codex's namespace and name, for tools that came from `namespace` tools: a
   * reply's call of such a name goes back as a `function_call` item with `namespace` and `name`
   * (`namespacedCall`, responses-tools.ts). Empty without namespace tools.
   */
  namespacedTools: Record<string, NamespacedTool>;
  /**
   * The custom (freeform) tools, served as functions taking `{input: string}`: a reply's call of
   * one goes back as a `custom_tool_call` item with that input. Pass this and `namespacedTools` to
   * `outputItems(reply, token, parsed)` (responses-items.ts). Empty without custom tools.
   */
  customTools: string[];
  /** One line per thing the request asked for that was dropped (tools this server cannot run), naming it. */
  warnings: string[];
}

/** How a request is parsed for its tenant. */
export interface ResponsesParseOptions {
  /** A strict tenant (`STRICT_TENANTS`): tools that would be dropped are refused instead. */
  strict?: boolean;
}

/**
 * Validates an OpenAI Responses API body into the chat transcript's terms: input items as chat
 * messages (`inputMessages`), function tools (`strict` defaults to true, as the API's does),
 * `tool_choice`, `parallel_tool_calls` and `text.format` as the reply constraint (the same rule as
 * chat completions' `response_format`), `max_output_tokens` as the reply budget (absent: none, the
 * backend's clamp). Namespace tools are flattened and tools this server cannot run dropped with a
 * warning (refused when `strict`): responses-tools.ts. A wrong shape is a 400 `invalid_request`
 * naming the field; what is not served (background mode, conversations, `truncation: "auto"`) is
 * refused the same way.
 *
 * @example parseResponsesBody({ model, input: "hi", instructions: "Be brief." }).messages // [{ role: "user", content: "hi" }]
 */
export function parseResponsesBody(json: unknown, options: ResponsesParseOptions = {}): ParsedResponsesRequest {
  const r = body.safeParse(json);
  if (!r.success) throw fieldError(r.error);
  const b = r.data;
  if (b.background) throw new ProtocolError("invalid_request", "background: background responses are not supported");
  if (b.conversation !== undefined && b.conversation !== null) throw new ProtocolError("invalid_request", "conversation: conversations are not supported; chain responses with previous_response_id");
  if (b.truncation === "auto") throw new ProtocolError("invalid_request", 'truncation: only "disabled" is supported (a transcript is never cut silently)');
  const strict = options.strict ?? false;
  const extra = typeof b.input === "string" ? [] : additionalTools(b.input);
  const served = mergeTools([responsesTools(b.tools ?? [], strict), ...extra.map((g) => responsesTools(g.tools, strict, `input[${g.index}].tools`))]);
  const tools = served.functions;
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
  const maxTokens = b.max_output_tokens ?? undefined;
  const store = b.store ?? true;
  return {
    model: b.model,
    messages,
    instructions,
    tools: chatTools.map(toToolDefinition),
    sampling: { ...(maxTokens !== undefined ? { maxTokens } : {}), temperature: b.temperature ?? 1, topP: b.top_p ?? 1, topK: 0, stop: [], stopTokenIds: [] },
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
    thinking: thinkingOfEffort(b.reasoning?.effort),
    namespacedTools: served.namespaced,
    customTools: served.custom,
    warnings: served.warnings,
  };
}
