import { z } from "zod";

/**
 * Whether the client asked the model to think, from each API's way of saying it, as one
 * `thinking: boolean | undefined` on the parse result (undefined: the client said nothing). The
 * backend renders it as the chat template's `enable_thinking` where the template has one (Qwen3
 * style); a template without it ignores it. Our models never return thinking blocks or reasoning
 * items: the flag only changes the prompt the template renders.
 */

/**
 * Anthropic's `thinking`: `{type: "enabled", budget_tokens}`, `{type: "adaptive"}` (Claude Code
 * 2.1) or `{type: "disabled"}`. Any other type is a 400 naming the field.
 */
export const anthropicThinking = z.discriminatedUnion(
  "type",
  [
    z.object({ type: z.literal("enabled"), budget_tokens: z.number().int().min(1).optional() }).loose(),
    z.object({ type: z.literal("adaptive") }).loose(),
    z.object({ type: z.literal("disabled") }).loose(),
  ],
  { error: 'must be {type: "enabled", budget_tokens?}, {type: "adaptive"} or {type: "disabled"}' },
);

/**
 * Anthropic's `thinking` as the flag: enabled and adaptive -> true, disabled -> false.
 *
 * @example thinkingOfAnthropic({ type: "adaptive" }) // true
 */
export function thinkingOfAnthropic(t: z.infer<typeof anthropicThinking> | undefined): boolean | undefined {
  return t === undefined ? undefined : t.type !== "disabled";
}

/** OpenAI's reasoning effort values (`reasoning_effort`, Responses' `reasoning.effort`). */
export const reasoningEffort = z.enum(["none", "minimal", "low", "medium", "high", "xhigh"], {
  error: 'must be "none", "minimal", "low", "medium", "high" or "xhigh"',
});

/**
 * A reasoning effort as the flag: `"none"` -> false, any other effort -> true, absent (or null) -> undefined.
 *
 * @example thinkingOfEffort("low") // true
 */
export function thinkingOfEffort(effort: z.infer<typeof reasoningEffort> | null | undefined): boolean | undefined {
  return effort == null ? undefined : effort !== "none";
}
