/**
 * Chat content as the wire contract carries it (an OpenAI-compatible subset, as the backend's
 * chat template sees it): messages, tool calls and definitions, and reply constraints.
 * Re-exported by `protocol/messages.ts`.
 */
export type Role = "system" | "user" | "assistant" | "tool";

export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  role: Role;
  /** Plain text content; `null` for an assistant message that only calls tools. */
  content: string | null;
  /** Assistant messages only. */
  tool_calls?: ToolCall[];
  /** Tool messages only: the id of the call this answers. */
  tool_call_id?: string;
  /** Optional participant / function name. */
  name?: string;
}

/**
 * The model's reply of one turn, parsed per the model's chat-template convention (e.g. Qwen's
 * `<tool_call>` blocks) into OpenAI's shape. `content` is `null` when the reply is only tool calls;
 * each call's `function.arguments` is JSON text.
 */
export interface AssistantMessage {
  role: "assistant";
  content: string | null;
  tool_calls?: ToolCall[];
}

export interface ToolDefinition {
  type: "function";
  /**
   * `strict: true`: a constrained call's arguments match `parameters` exactly (no properties it
   * does not name, as OpenAI's strict mode); otherwise best effort: the named properties are
   * enforced, others allowed.
   */
  function: { name: string; description?: string; parameters?: Record<string, unknown>; strict?: boolean };
}

/**
 * What the reply must be (structured outputs). The backend compiles it, for its chat template's
 * tool-call convention, into a grammar whose token mask is applied to the logits before sampling
 * (gpu-backend/constraint/); a completed structure ends the reply.
 *
 * - `json_object`: the reply is one JSON object (`response_format: {type: "json_object"}`).
 * - `json_schema`: the reply is one JSON value matching `schema` (`response_format:
 *   {type: "json_schema"}`); `strict` as for a tool.
 * - `tool_calls` over the request's `tools`: `"required"` one call or more (parallel) and nothing
 *   else; `{name}` one call of that tool; `"auto"` text, or calls once the template's call marker
 *   starts (the rest of the call is then constrained); `"none"` no call (the marker is masked
 *   where it is one token). With `answer` (a `response_format` next to callable tools), `"auto"`
 *   replies either with calls or with that JSON answer, never free text.
 */
export type ReplyConstraint = JsonAnswer | { type: "tool_calls"; choice: ToolChoice; parallel: boolean; answer?: JsonAnswer };

/** A reply that is one JSON value: any object, or a value matching `schema`. */
export type JsonAnswer = { type: "json_object" } | { type: "json_schema"; schema: Record<string, unknown>; strict: boolean };

export type ToolChoice = "auto" | "required" | "none" | { name: string };
