import type { EngineOptions, TokenRequest, TokenResult } from "../gpu-backend/engine/engine-options";

/**
 * How `npm run bench -- speculative` turns the engine's speculative decoding on and off: the one
 * place that knows the engine's option (issue 37, `--speculative off|lookup|suffix`). The bench
 * builds one engine with speculation on in a mode and runs the "off" requests on that same engine
 * with the per-request opt-out, interleaved with the "on" ones.
 *
 * `null` while the engine has no speculative decoding: the bench then measures the "off" side
 * (and llama.cpp's both sides) and reports the "on" side as pending (`PENDING`).
 *
 * @example
 * const hook = speculationHook();
 * if (hook) engine = benchEngine(model, executor, { numBlocks, extra: hook.engineOptions("lookup") });
 */
export interface SpeculationHook {
  /** The modes the engine offers besides off, the first the engine's default. */
  modes: readonly string[];
  /** Engine options with speculation on in `mode`. */
  engineOptions(mode: string): Partial<EngineOptions>;
  /** What an "off" request adds to opt out on an engine that speculates. */
  optOut: Partial<TokenRequest>;
  /** Draft tokens a finished request verified and accepted. */
  figures(result: TokenResult): { drafted: number; accepted: number };
}

/** Why the "on" side is not measured, while `speculationHook()` is null. */
export const PENDING = "pending: this build's engine has no speculative decoding option yet (issue 37; branch speculative): speculation off measured, on not run";

/** The engine's speculation, or null where it has none. */
export function speculationHook(): SpeculationHook | null {
  return null;
}
