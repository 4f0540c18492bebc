import type { ChatMessage, ReplyConstraint, SamplingParams, ToolDefinition } from "../../protocol/messages";
import type { ChatCodec } from "./chat-codec";

/**
 * Demo agent mode (`--demo-agent [N]`, off by default), for untrained models only.
 *
 * The embedded demo models have random weights: they never call a tool by themselves and never
 * end a reply (the end-of-turn token is one in 151k), so a real agent CLI against them never
 * finishes a run. In this mode such a model behaves like an agent's model in shape (not in
 * meaning):
 *
 * - a turn with tools, no constraint of its own (none, or `tool_choice` auto without a JSON
 *   answer) and the user's message last (system messages after it aside: Claude Code puts one
 *   there) is constrained to exactly one tool call (`tool_choice: "required"`, not parallel); any
 *   other turn without a constraint of its own is constrained to visible words ({@link
 *   VISIBLE_TEXT}: a random model's greedy text is whitespace, which agent CLIs take for no answer
 *   and ask again): {@link demoConstraint};
 * - every reply's budget is at most `replyTokens` (N, default 48); a free-text reply that reaches
 *   it ends with the end-of-turn token ({@link endOfTurnTokenId}) appended as a real one would be
 *   (finish `stop`; the kept tokens are what a trained model's end of turn leaves), a constrained
 *   call closes within it;
 * - sampling is greedy (temperature 0): {@link demoSampling}.
 */
export interface DemoAgent {
  /** N: the most tokens of any reply. */
  replyTokens: number;
}

/** N when `--demo-agent` is given without one. */
export const DEFAULT_DEMO_AGENT_TOKENS = 48;

/**
 * A demo reply's free text: a JSON string of letters and spaces, starting with a letter (at most
 * 40 characters, so it closes within any budget of 48 tokens).
 */
export const VISIBLE_TEXT: ReplyConstraint = { type: "json_schema", schema: { type: "string", pattern: "^[A-Za-z][A-Za-z ]{0,39}$" }, strict: true };

/**
 * The constraint a turn runs under in demo agent mode, when it asks for none of its own (none, or
 * `tool_choice` auto without a JSON answer; else the turn's own): one tool call when the turn has
 * tools, its last message but system ones is the user's, and the template's calls can be
 * constrained (`constrainable`: not Gemma 3's pythonic ones); else visible words
 * ({@link VISIBLE_TEXT}).
 *
 * @example demoConstraint(undefined, tools, [{ role: "user", content: "hi" }], true) // { type: "tool_calls", choice: "required", parallel: false }
 */
export function demoConstraint(own: ReplyConstraint | undefined, tools: readonly ToolDefinition[] | undefined, messages: readonly ChatMessage[], constrainable: boolean): ReplyConstraint | undefined {
  const free = own === undefined || (own.type === "tool_calls" && own.choice === "auto" && own.answer === undefined);
  if (!free) return own;
  const last = messages.findLast((m) => m.role !== "system");
  if (constrainable && (tools?.length ?? 0) > 0 && last?.role === "user") return { type: "tool_calls", choice: "required", parallel: false };
  return VISIBLE_TEXT;
}

/** Greedy sampling: demo runs are reproducible. */
export function demoSampling(sampling: SamplingParams): SamplingParams {
  return { ...sampling, temperature: 0 };
}

/**
 * The token that ends an assistant turn as the chat template writes it (Qwen's `<|im_end|>`):
 * the first token after an assistant message's content, when it is one of the model's
 * end-of-turn tokens; else the first of those. Appending this one keeps a delta turn's prompt
 * equal to the template's rendering, so every generated token is reused.
 *
 * @example endOfTurnTokenId(codec) // 151645
 */
export function endOfTurnTokenId(codec: ChatCodec): number | undefined {
  const marker = "\u2063reply\u2063";
  try {
    const text = codec.render({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: marker }], addGenerationPrompt: false });
    const at = text.lastIndexOf(marker);
    const next = at < 0 ? undefined : codec.encode(text.slice(at + marker.length))[0];
    if (next !== undefined && codec.eosTokenIds.includes(next)) return next;
  } catch {
    // a template that cannot render this pair: fall back to the model's first end-of-turn token
  }
  return codec.eosTokenIds[0];
}
