import type { Engine, TokenResult } from "../gpu-backend/engine/engine";
import { greedy } from "./kit/engine";
import { compareOutputs, type RunRecord } from "./speculative-report";
import type { SpeculationHook } from "./speculative-engine";
import type { TokenTurn } from "./speculative-workload";

/** Where a greedy reply with speculation first left the reply without, and how close the model's top two were there. */
export interface Divergence {
  kind: string;
  batch: number;
  request: number;
  /** Index of the first generated token that differs. */
  at: number;
  /** ln p(top 1) - ln p(top 2) at that index, without speculation and with (small: a near tie). */
  offMargin: number | null;
  onMargin: number | null;
}

/** Most (kind, batch) groups re-run for their divergences: each costs an off and an on run with logprobs. */
const MAX_GROUPS = 4;

/**
 * Why greedy outputs with speculation differ from those without, where they do: each differing
 * group (kind, batch; at most MAX_GROUPS) is run again off and on with the top-2 logprobs, and
 * each differing request reports the first differing token and the margin between the model's
 * two most likely tokens there. Margins of a few thousandths of a nat are near ties that the
 * executor's rounding decides differently when a step computes several rows (a verify step) than
 * when it computes one; a large margin would be a logic error.
 *
 * @example
 * const divergences = await explainDivergences(engine, hook, turns, runs);
 */
export async function explainDivergences(engine: Engine, hook: SpeculationHook, turns: readonly TokenTurn[], runs: readonly RunRecord[]): Promise<Divergence[]> {
  const groups = new Set(compareOutputs(runs).mismatches.map((m) => m.split(" on rep")[0]!.split(" off rep")[0]!));
  const out: Divergence[] = [];
  for (const group of [...groups].slice(0, MAX_GROUPS)) {
    const [kind, , batchText] = group.split(" ");
    const turn = turns.find((t) => t.kind === kind)!;
    const batch = Number(batchText);
    const once = (setting: "off" | "on"): Promise<TokenResult[]> => {
      const salt = `divergence-${group}-${setting}`;
      const optOut = setting === "off" ? hook.optOut : {};
      return Promise.all(turn.prompts.slice(0, batch).map((tokenIds) => engine.generateTokens({ tokenIds, sampling: { ...greedy(turn.maxTokens), ignoreEos: false, logprobs: 2 }, cacheSalt: salt, ...optOut })));
    };
    const off = await once("off");
    const on = await once("on");
    off.forEach((a, request) => {
      const b = on[request]!;
      let at = 0;
      while (at < a.tokenIds.length && at < b.tokenIds.length && a.tokenIds[at] === b.tokenIds[at]) at++;
      if (at === a.tokenIds.length && at === b.tokenIds.length) return;
      out.push({ kind: turn.kind, batch, request, at, offMargin: margin(a, at), onMargin: margin(b, at) });
    });
  }
  return out;
}

function margin(r: TokenResult, at: number): number | null {
  const top = r.logprobs?.[at]?.topLogprobs;
  return top && top.length > 1 ? Math.round((top[0]!.logprob - top[1]!.logprob) * 1e4) / 1e4 : null;
}
