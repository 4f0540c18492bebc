import type { LoadedModel } from "../gpu-backend/engine/load-model";
import type { ChatMessage } from "../protocol/messages";

/**
 * The cross-trajectory workload of `npm run bench -- speculative` (issue 37: what `--speculative
 * suffix` adds over `lookup`): one tenant runs the same recurring job in several trajectories
 * (a nightly maintenance job, one trajectory per night); the measured turn is the job's next
 * night, a new trajectory whose prompt differs in the run number only. What the model writes
 * (a Python function, a paragraph of plan) is its own text, not in the prompt, and repeats what
 * it wrote in the earlier nights: the tenant's suffix tree holds it, the sequence's own n-gram
 * index does not.
 *
 * Checked on the trained SmolLM2-135M's own greedy reply without speculation:
 * `crossCopiedFraction` (the share of its tokens in spans found in the tenant's earlier replies
 * but not in the sequence's own prompt and earlier output) is reported per kind.
 *
 * @example
 * const turns = crossTokenTurns(model, crossTurns());
 * turns[0].earlier.length; // 4 earlier trajectories, then turns[0].prompt is measured
 */

export interface CrossTurn {
  /** Short name: nightly-code, nightly-plan. */
  kind: string;
  /** What the reply repeats, in words. */
  about: string;
  /** Most generated tokens, in the earlier trajectories and the measured turn alike. */
  maxTokens: number;
  /** The tenant's earlier trajectories of the job (their replies go into its suffix tree). */
  earlier: ChatMessage[][];
  /** The measured turn: the job's next trajectory. */
  measured: ChatMessage[];
}

/** A cross-trajectory kind's prompts as token ids. */
export interface CrossTokenTurn extends Omit<CrossTurn, "earlier" | "measured"> {
  earlier: number[][];
  prompt: number[];
}

/** Earlier trajectories per kind (nights 1-4; night 5 is measured). */
export const EARLIER_TRAJECTORIES = 4;

/** The kinds: each a recurring job, `EARLIER_TRAJECTORIES` nights before the measured one. */
export function crossTurns(): CrossTurn[] {
  const nights = (f: (night: number) => ChatMessage[]) => ({ earlier: Array.from({ length: EARLIER_TRAJECTORIES }, (_, i) => f(i + 1)), measured: f(EARLIER_TRAJECTORIES + 1) });
  return [
    { kind: "nightly-code", about: "the Python backup check the agent wrote on earlier nights", maxTokens: 110, ...nights(nightlyCode) },
    { kind: "nightly-plan", about: "the paragraph of plan the agent wrote on earlier nights", maxTokens: 110, ...nights(nightlyPlan) },
  ];
}

/** The kinds' transcripts rendered with the model's chat template and tokenized. */
export function crossTokenTurns(model: Pick<LoadedModel, "codec">, turns: readonly CrossTurn[]): CrossTokenTurn[] {
  const encode = (messages: ChatMessage[]) => model.codec.encode(model.codec.render({ messages, addGenerationPrompt: true }));
  return turns.map(({ earlier, measured, ...t }) => ({ ...t, earlier: earlier.map(encode), prompt: encode(measured) }));
}

function nightlyCode(night: number): ChatMessage[] {
  return [
    { role: "system", content: "You are a coding agent." },
    { role: "user", content: `Nightly run ${39 + night}: write the Python function that checks that last night's backup file exists and is not empty.` },
  ];
}

function nightlyPlan(night: number): ChatMessage[] {
  return [
    { role: "system", content: "You are a coding agent." },
    { role: "user", content: `Run ${night} of the nightly job. Explain in one paragraph how you will check that the database backup finished correctly.` },
  ];
}

/**
 * Per output token: whether it lies in a span of at least `minSpan` tokens found verbatim in
 * `source`, spans matched greedily left to right, longest first; a span for output token i may
 * start only before `startLimit(i)` in `source` (default anywhere).
 *
 * @example
 * copiedMask([7, 1, 2, 3, 4], [1, 2, 3, 4, 5], 4); // [true, true, true, true, false]
 */
export function copiedMask(source: readonly number[], output: readonly number[], minSpan = 4, startLimit: (i: number) => number = () => source.length): boolean[] {
  const starts = new Map<number, number[]>();
  source.forEach((t, p) => {
    const list = starts.get(t);
    if (list) list.push(p);
    else starts.set(t, [p]);
  });
  const mask = new Array<boolean>(output.length).fill(false);
  for (let i = 0; i < output.length; ) {
    let best = 0;
    const limit = startLimit(i);
    for (const p of starts.get(output[i]!) ?? []) {
      if (p >= limit) break;
      let n = 0;
      while (i + n < output.length && p + n < source.length && source[p + n] === output[i + n]) n++;
      best = Math.max(best, n);
    }
    if (best >= minSpan) {
      mask.fill(true, i, i + best);
      i += best;
    } else i++;
  }
  return mask;
}

/**
 * The share of `output` that repeats the tenant's `earlier` replies and that the sequence itself
 * could not supply: tokens in spans of at least `minSpan` found in one earlier reply, less those
 * in spans found in the prompt or in the output before them (what prompt lookup can draft). 0
 * for an empty output.
 *
 * @example
 * crossCopiedFraction([9, 9], [[1, 2, 3, 4, 5]], [1, 2, 3, 4, 8]); // 0.8
 * crossCopiedFraction([1, 2, 3, 4], [[1, 2, 3, 4, 5]], [1, 2, 3, 4, 8]); // 0: the prompt has it
 */
export function crossCopiedFraction(prompt: readonly number[], earlier: readonly (readonly number[])[], output: readonly number[], minSpan = 4): number {
  if (output.length === 0) return 0;
  const history = earlier.flatMap((reply) => [...reply, -1]);
  const fromEarlier = copiedMask(history, output, minSpan);
  // The sequence so far: the prompt, then the output up to (not including) token i.
  const own = copiedMask([...prompt, ...output], output, minSpan, (i) => prompt.length + i);
  return fromEarlier.filter((m, i) => m && !own[i]).length / output.length;
}
