/**
 * Claude Code's billing line: Claude Code 2.1 puts `x-anthropic-billing-header: cc_version=...;
 * cc_entrypoint=...` as the first system block. It is billing metadata for Anthropic, not prompt,
 * and it changes per session, so left in place it would break every session's shared system-prompt
 * prefix. It is removed before the transcript is built, and the parse result names the repair
 * (`BILLING_HEADER_REPAIR`).
 */

/** What a system text starts with when it is Claude Code's billing line. */
export const BILLING_HEADER_PREFIX = "x-anthropic-billing-header:";

/** The repair's name on the parse result (`repairs`) and the turn record (`repaired.quirks`). */
export const BILLING_HEADER_REPAIR = "billing-header";

/**
 * A system text without its leading billing line: the first line is removed when it starts with
 * `x-anthropic-billing-header:` (leading whitespace and the blank lines after it too). `null` when
 * nothing else remains (the block was only the billing line); the text unchanged (same string)
 * when it has no billing line.
 *
 * @example withoutBillingHeader("x-anthropic-billing-header: cc_version=2.1.3; cc_entrypoint=cli") // null
 * @example withoutBillingHeader("You are Claude Code.") // "You are Claude Code."
 */
export function withoutBillingHeader(text: string): string | null {
  const start = text.trimStart();
  if (!start.startsWith(BILLING_HEADER_PREFIX)) return text;
  const newline = start.indexOf("\n");
  const rest = newline < 0 ? "" : start.slice(newline + 1).replace(/^\s*\n/, "");
  return rest.trim() === "" ? null : rest;
}
