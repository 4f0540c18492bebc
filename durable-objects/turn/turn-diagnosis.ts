import { sha256Hex } from "../../protocol/hex";
import type { ChatMessage } from "../../protocol/messages";
import { diagnose, type CacheDiagnosis, type NamedTurn } from "./cache-diagnosis";
import { canonicalTools } from "./transcript-diff";
import type { TurnPlan } from "./turn-plan";
import type { CommitTurn, TurnInput, TurnStore } from "./turn-types";

/**
 * A trajectory turn's cache diagnosis (cache-diagnosis.ts), when its input asked for one: the
 * named turn looked up in this trajectory's store (a Messages answer by id, a response by token),
 * then compared. A response of another trajectory (a fork's parent) is `unavailable`: its
 * transcript is in another object. Also answers what the commit keeps of a Messages turn that
 * asked (its answer's id), so a later turn can name it.
 *
 * @example const { diagnosis, answer } = await turnDiagnosis({ store, input, plan, stored: ctx.transcript });
 */
export async function turnDiagnosis(p: { store: TurnStore; input: TurnInput; plan: TurnPlan; stored: readonly ChatMessage[] }): Promise<{ diagnosis?: CacheDiagnosis; answer?: CommitTurn["answer"] }> {
  const { store, input, plan } = p;
  const compare = input.compare;
  if (!compare) return {};
  const toolsHash = await sha256Hex(canonicalTools(plan.tools));
  const model = input.model ?? null;
  const answer = compare.api === "messages" ? { answer: { id: compare.id, toolsHash, model } } : {};
  let named: NamedTurn | null;
  if (compare.api === "messages") {
    // The first turn names none: there is nothing to compare, and Anthropic answers `diagnostics: null`.
    if (compare.previous === null) return answer;
    named = store.messageAnswer(compare.previous);
  } else {
    if (compare.trajectoryId !== input.trajectoryId) return { diagnosis: { status: "unavailable", why: "the compared response belongs to another trajectory (this turn forked from it)" } };
    const r = store.response(compare.token);
    // A response's echoed model is the client's name for it: not compared.
    named = r && { turn: r.turn, messageEnd: r.messageEnd, rewritten: r.rewritten, toolsHash: await sha256Hex(r.toolsJson), model: null, promptTokens: r.usage.promptTokens, completionTokens: r.usage.completionTokens };
  }
  const diagnosis = diagnose({ named, latestTurn: store.lastTurn(), stored: p.stored, incoming: plan.fullTranscript, prefixBreak: plan.prefixBreak, toolsHash, model: named?.model === null ? null : model });
  return { diagnosis, ...answer };
}
