import { z } from "zod";
import { ProtocolError } from "../../protocol";
import type { ChatMessage, ToolCall } from "../../protocol/messages";
import type { AssistantReply } from "../../durable-objects/turn/turn-types";
import { fieldError } from "./field-error";
import { namespacedCall, namespacedToolName, type NamespacedTool } from "./responses-tools";

/**
 * Responses API items <-> the chat transcript (the one transcript model underneath). Input items:
 * messages (`role` user / assistant / system / developer, content a string or text parts),
 * `function_call` and `function_call_output`. An assistant message and the function calls after
 * it are one assistant turn of the transcript (as the model wrote them: text, then calls), so a
 * client that sends back a response's output items sends back exactly the stored reply.
 *
 * `reasoning` items (Codex sends them back, with `encrypted_content` under `store: false`) are
 * accepted and left out of the transcript, every time: our models write no reasoning items, so
 * the stored transcript never has them, and leaving them out keeps a resent conversation an
 * extension of the stored one. A `function_call` of a namespaced tool (`namespace` + `name`) is
 * the call of its flat name (`namespacedToolName`, responses-tools.ts); a `custom_tool_call`
 * (`{call_id, name, input}`) is the call of the function its custom tool is served as, with
 * arguments `{"input": ...}`, and its `custom_tool_call_output` a tool message. Going out, the
 * same calls become those items again (`CallShapes`).
 */

const textPart = z.union([
  z.object({ type: z.enum(["input_text", "output_text"]), text: z.string() }).loose(),
  z.object({ type: z.literal("refusal"), refusal: z.string() }).loose(),
]);

const messageItem = z
  .object({
    type: z.literal("message").optional(),
    role: z.enum(["user", "assistant", "system", "developer"]),
    content: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]),
  })
  .loose();

const functionCallItem = z
  .object({ type: z.literal("function_call"), call_id: z.string().min(1), name: z.string().min(1), namespace: z.string().min(1).nullish(), arguments: z.string() })
  .loose();

const customToolCallItem = z
  .object({ type: z.literal("custom_tool_call"), call_id: z.string().min(1), name: z.string().min(1), namespace: z.string().min(1).nullish(), input: z.string() })
  .loose();

const customToolCallOutputItem = z
  .object({ type: z.literal("custom_tool_call_output"), call_id: z.string().min(1), output: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]) })
  .loose();

const reasoningItem = z.object({ type: z.literal("reasoning"), summary: z.array(z.unknown()).optional(), encrypted_content: z.string().nullish() }).loose();

const functionCallOutputItem = z
  .object({ type: z.literal("function_call_output"), call_id: z.string().min(1), output: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))]) })
  .loose();

/** One input item as the request's schema takes it (its type is checked by `inputMessages`). */
export const inputItem = z.looseObject({ type: z.string().optional(), role: z.string().optional() });

export type InputItem = z.infer<typeof inputItem>;

/**
 * The chat messages a request's `input` stands for. `reasoning` items are left out (above). An
 * unsupported item or content part (images, files, item references, built-in tool calls) is a 400
 * naming it: never dropped.
 *
 * @example inputMessages([{ role: "user", content: "hi" }]) // [{ role: "user", content: "hi" }]
 */
export function inputMessages(items: readonly InputItem[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  items.forEach((raw, i) => {
    const where = `input[${i}]`;
    const type = raw.type ?? "message";
    if (type === "message") {
      const m = parseItem(messageItem, raw, where);
      const content = typeof m.content === "string" ? m.content : textOf(m.content, `${where}.content`);
      if (m.role === "assistant") {
        out.push({ role: "assistant", content });
        return;
      }
      out.push({ role: m.role === "developer" ? "system" : m.role, content });
    } else if (type === "function_call" || type === "custom_tool_call") {
      let call: ToolCall;
      if (type === "function_call") {
        const c = parseItem(functionCallItem, raw, where);
        call = { id: c.call_id, type: "function", function: { name: c.namespace ? namespacedToolName(c.namespace, c.name) : c.name, arguments: c.arguments } };
      } else {
        const c = parseItem(customToolCallItem, raw, where);
        call = { id: c.call_id, type: "function", function: { name: c.namespace ? namespacedToolName(c.namespace, c.name) : c.name, arguments: JSON.stringify({ input: c.input }) } };
      }
      const last = out.at(-1);
      // Calls join the assistant turn they follow (its text, or the calls before them).
      if (last?.role === "assistant") last.tool_calls = [...(last.tool_calls ?? []), call];
      else out.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (type === "function_call_output" || type === "custom_tool_call_output") {
      const o = parseItem(type === "function_call_output" ? functionCallOutputItem : customToolCallOutputItem, raw, where);
      out.push({ role: "tool", tool_call_id: o.call_id, content: typeof o.output === "string" ? o.output : textOf(o.output, `${where}.output`) });
    } else if (type === "reasoning") {
      parseItem(reasoningItem, raw, where); // accepted, never part of the transcript
    } else if (type === "additional_tools") {
      // Tools, not transcript: the request's parser serves them with its tools (additionalTools).
    } else if (type === "configuration_update") {
      // Codex 0.171's per-turn settings (`reasoning`): not transcript; the request's own fields rule.
    } else {
      throw new ProtocolError("invalid_request", `${where}.type: "${type}" items are not supported (message, function_call, function_call_output, custom_tool_call, custom_tool_call_output, reasoning, additional_tools and configuration_update are)`);
    }
  });
  return out;
}

const additionalToolsItem = z.object({ type: z.literal("additional_tools"), tools: z.array(z.looseObject({ type: z.string() })) }).loose();

/**
 * The tools that `additional_tools` input items carry (Codex 0.171's "responses lite" sends tools
 * as input items), each list with the index of its item: served with the request's `tools`, left
 * out of the transcript.
 *
 * @example additionalTools([{ type: "additional_tools", tools: [{ type: "function", name: "f" }] }]) // [{ index: 0, tools: [...] }]
 */
export function additionalTools(items: readonly InputItem[]): { index: number; tools: { type: string; [key: string]: unknown }[] }[] {
  return items.flatMap((raw, i) => (raw.type === "additional_tools" ? [{ index: i, tools: parseItem(additionalToolsItem, raw, `input[${i}]`).tools }] : []));
}

function parseItem<T extends z.ZodType>(schema: T, raw: unknown, where: string): z.infer<T> {
  const r = schema.safeParse(raw);
  if (r.success) return r.data;
  throw fieldError(r.error, { prefix: where });
}

function textOf(parts: readonly { type: string }[], where: string): string {
  return parts
    .map((p, k) => {
      const r = textPart.safeParse(p);
      if (!r.success) throw new ProtocolError("invalid_request", `${where}[${k}].type: "${p.type}" content is not supported (input_text, output_text and refusal are)`);
      return "text" in r.data ? r.data.text : r.data.refusal;
    })
    .join("");
}

/** A Responses API output (or input) item. */
export type ResponseItem =
  | { type: "message"; id: string; status: "completed"; role: "assistant"; content: { type: "output_text"; text: string; annotations: []; logprobs: [] }[] }
  | { type: "message"; id: string; status: "completed"; role: "user" | "system"; content: { type: "input_text"; text: string }[] }
  | { type: "function_call"; id: string; call_id: string; name: string; namespace?: string; arguments: string; status: "completed" }
  | { type: "custom_tool_call"; id: string; call_id: string; name: string; namespace?: string; input: string; status: "completed" }
  | { type: "function_call_output"; id: string; call_id: string; output: string; status: "completed" };

/**
 * How a request's tool calls go back (the Responses parse result's `namespacedTools` and
 * `customTools`): a namespaced tool's call as a `function_call` with `namespace` and its own
 * `name`, a custom tool's as a `custom_tool_call` with its `input`. Absent: every call is a plain
 * `function_call`.
 */
export interface CallShapes {
  namespacedTools?: Readonly<Record<string, NamespacedTool>>;
  customTools?: readonly string[];
}

/**
 * A reply's output items: its text as a message (when it has text), then one `function_call` (or
 * `custom_tool_call`: `shapes`) per tool call. Ids are derived from the response's token, so a
 * retrieved response repeats them.
 *
 * @example outputItems(reply, token, parsed) // [{ type: "message", id: "msg_<token>_0", ... }, { type: "function_call", ... }]
 */
export function outputItems(reply: AssistantReply, token: string, shapes: CallShapes = {}): ResponseItem[] {
  return messageItems(reply, `${token}_0`, shapes);
}

/**
 * One call as its output item, by the request's call shapes (`id`: the item id's key, the
 * response's token, `_0_` and the call's index in a reply).
 *
 * @example callItem(call, `${token}_0_1`, shapes) // { type: "function_call", id: "fc_<token>_0_1", call_id: call.id, ... }
 */
export function callItem(c: ToolCall, id: string, shapes: CallShapes): ResponseItem {
  if (shapes.customTools?.includes(c.function.name)) {
    let input = c.function.arguments;
    try {
      const args = JSON.parse(input) as unknown;
      if (typeof args === "object" && args !== null && typeof (args as { input?: unknown }).input === "string") input = (args as { input: string }).input;
    } catch {
      // Not the {input} object: the arguments as they are.
    }
    return { type: "custom_tool_call", id: `ctc_${id}`, call_id: c.id, ...namespacedCall(c.function.name, shapes.namespacedTools ?? {}), input, status: "completed" };
  }
  const named = namespacedCall(c.function.name, shapes.namespacedTools ?? {});
  return { type: "function_call", id: `fc_${id}`, call_id: c.id, ...named, arguments: c.function.arguments, status: "completed" };
}

/** One transcript message as items (`key`: makes their ids unique within the response). */
export function messageItems(m: ChatMessage, key: string, shapes: CallShapes = {}): ResponseItem[] {
  const items: ResponseItem[] = [];
  if (m.role === "tool") return [{ type: "function_call_output", id: `fco_${key}`, call_id: m.tool_call_id ?? "", output: m.content ?? "", status: "completed" }];
  if (m.role === "assistant") {
    if (m.content) items.push({ type: "message", id: `msg_${key}`, status: "completed", role: "assistant", content: [{ type: "output_text", text: m.content, annotations: [], logprobs: [] }] });
    (m.tool_calls ?? []).forEach((c, k) => items.push(callItem(c, `${key}_${k}`, shapes)));
    return items;
  }
  return [{ type: "message", id: `msg_${key}`, status: "completed", role: m.role, content: [{ type: "input_text", text: m.content ?? "" }] }];
}
