import { Template } from "@huggingface/jinja";
import type { ChatMessage, ToolDefinition } from "../../protocol/messages";

/** What one rendering of a transcript needs. */
export interface RenderChatParams {
  /** OpenAI-shaped messages (assistant `tool_calls`, `tool` messages with `tool_call_id`). */
  messages: readonly ChatMessage[];
  /** OpenAI-shaped tool definitions ({ type: "function", function: { name, description, parameters } }). */
  tools?: readonly ToolDefinition[] | undefined;
  /** Append the header of the assistant's next turn (`<|im_start|>assistant\n` in Qwen). */
  addGenerationPrompt: boolean;
  /** More template variables, e.g. `{ enable_thinking: false }`. */
  extra?: Record<string, unknown>;
}

/** How tool-call arguments reach the template. */
export type ToolArgumentsMode =
  /** Strings if the template prints string arguments verbatim (`arguments is string`), else objects. */
  | "auto"
  /** The JSON text exactly as the model produced it (best for token-identical re-rendering). */
  | "string"
  /** Parsed JSON objects (what templates that apply `| tojson` expect); unparsable text stays a string. */
  | "object";

/**
 * A compiled Hugging Face chat template (Jinja, rendered with @huggingface/jinja).
 *
 * Messages are passed in the shape transformers passes them: a null `content` becomes "" (the
 * Qwen templates call string methods on it), and tool-call `function.arguments` stay JSON text
 * when the template prints strings verbatim (Qwen's `tool_call.arguments is string`), so the
 * rendered call is byte-identical to what the model generated; otherwise they are parsed into
 * objects for the template's `tojson`.
 *
 * @example
 * const template = new ChatTemplate(tokenizerConfig.chat_template, { bosToken: null, eosToken: "<|im_end|>" });
 * const prompt = template.render({ messages: [{ role: "user", content: "hi" }], addGenerationPrompt: true });
 * // "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
 */
export class ChatTemplate {
  readonly source: string;
  readonly bosToken: string | null;
  readonly eosToken: string | null;
  readonly toolArguments: "string" | "object";
  readonly #template: Template;

  constructor(source: string, options: { bosToken?: string | null; eosToken?: string | null; toolArguments?: ToolArgumentsMode } = {}) {
    this.source = source;
    this.#template = new Template(source);
    this.bosToken = options.bosToken ?? null;
    this.eosToken = options.eosToken ?? null;
    const mode = options.toolArguments ?? "auto";
    this.toolArguments = mode === "auto" ? (/arguments\s+is\s+string/.test(source) ? "string" : "object") : mode;
  }

  /**
   * Renders a transcript to prompt text.
   *
   * @example
   * template.render({ messages, tools, addGenerationPrompt: true, extra: { enable_thinking: false } });
   */
  render(params: RenderChatParams): string {
    const tools = params.tools && params.tools.length > 0 ? params.tools.map((t) => structuredClone(t)) : undefined;
    return this.#template.render({
      ...params.extra,
      messages: params.messages.map((m) => this.#templateMessage(m)),
      tools,
      add_generation_prompt: params.addGenerationPrompt,
      bos_token: this.bosToken ?? "",
      eos_token: this.eosToken ?? "",
    });
  }

  #templateMessage(message: ChatMessage): Record<string, unknown> {
    const out: Record<string, unknown> = { role: message.role, content: message.content ?? "" };
    if (message.name !== undefined) out.name = message.name;
    if (message.tool_call_id !== undefined) out.tool_call_id = message.tool_call_id;
    if (message.tool_calls && message.tool_calls.length > 0) {
      out.tool_calls = message.tool_calls.map((call) => ({
        id: call.id,
        type: call.type,
        function: { name: call.function.name, arguments: this.#arguments(call.function.arguments) },
      }));
    }
    return out;
  }

  #arguments(text: string): unknown {
    if (this.toolArguments === "string") return text;
    try {
      return JSON.parse(text) as unknown;
    } catch {
      return text;
    }
  }
}

/**
 * One-shot rendering: compiles `template` (or uses a compiled one) and renders.
 *
 * @example
 * renderChat({ template: source, eosToken: "<|im_end|>", messages, tools, addGenerationPrompt: true });
 */
export function renderChat(params: RenderChatParams & { template: string | ChatTemplate; bosToken?: string | null; eosToken?: string | null }): string {
  const template =
    typeof params.template === "string" ? new ChatTemplate(params.template, { bosToken: params.bosToken, eosToken: params.eosToken }) : params.template;
  return template.render(params);
}
