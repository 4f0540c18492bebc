import type { ChatMessage, ToolDefinition } from "../../protocol/chat-content";

/**
 * Tools for a model whose chat template renders none (its convention is `"none"`: SmolLM2, many
 * small instruct models), the way llama.cpp's generic format and Hermes-style templates do it:
 * the tools are described in the system message with the `<tool_call>` reply format, earlier
 * assistant calls become `<tool_call>` blocks in their text, and tool results become user turns of
 * `<tool_response>` blocks. The reply then parses with the `hermes` convention and constrained
 * decoding spells the same markers, so tool_choice works on such a model. The rewrite is a pure
 * function of the messages and the tools: a conversation renders to the same prefix every turn.
 *
 * @example
 * template.render({ messages: withGenericTools(messages, tools), addGenerationPrompt: true });
 */
export function withGenericTools(messages: readonly ChatMessage[], tools: readonly ToolDefinition[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  const system = toolsSystemText(tools);
  const first = messages[0];
  if (first?.role === "system") out.push({ role: "system", content: `${first.content ?? ""}\n\n${system}` });
  else out.push({ role: "system", content: system });
  for (const m of first?.role === "system" ? messages.slice(1) : messages) {
    if (m.role === "assistant" && m.tool_calls?.length) {
      const calls = m.tool_calls.map((c) => `<tool_call>\n${JSON.stringify({ name: c.function.name, arguments: parseArguments(c.function.arguments) })}\n</tool_call>`);
      out.push({ role: "assistant", content: [m.content ?? "", ...calls].filter((s) => s.length > 0).join("\n") });
    } else if (m.role === "tool") {
      const response = `<tool_response>\n${m.content ?? ""}\n</tool_response>`;
      const last = out.at(-1)!;
      // Results of one round of calls go in one user turn, as Hermes-style templates write them.
      if (last.role === "user" && last.content?.startsWith("<tool_response>")) last.content = `${last.content}\n${response}`;
      else out.push({ role: "user", content: response });
    } else {
      out.push({ role: m.role, content: m.content });
    }
  }
  return out;
}

function toolsSystemText(tools: readonly ToolDefinition[]): string {
  return [
    "# Tools",
    "",
    "You may call one or more functions to assist with the user query.",
    "",
    "You are provided with function signatures within <tools></tools> XML tags:",
    "<tools>",
    ...tools.map((t) => JSON.stringify(t)),
    "</tools>",
    "",
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:",
    "<tool_call>",
    '{"name": <function-name>, "arguments": <args-json-object>}',
    "</tool_call>",
  ].join("\n");
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
