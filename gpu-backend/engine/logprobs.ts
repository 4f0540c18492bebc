import type { TokenLogprob } from "../../protocol/messages";
import type { TokenPiece } from "../tokenizer/token-pieces";

/** The floor of a reported logprob: OpenAI and vLLM report -9999 for a token of probability 0. */
export const MIN_LOGPROB = -9999;

/** The log probabilities at one generated position (token ids; the engine adds their text). */
export interface PositionLogprobs {
  /** ln p of the chosen token. */
  logprob: number;
  /** The `topN` most likely tokens, most likely first; equal logprobs: lower id first. */
  top: { tokenId: number; logprob: number }[];
}

/**
 * The log-softmax of one row of raw logits, evaluated at the chosen token and at the `topN` most
 * likely tokens: ln p_i = x_i - (max + ln sum_j exp(x_j - max)), accumulated in float64. Raw means
 * the model's own distribution, before temperature, top-k and top-p (vLLM's default
 * `logprobs_mode`, and what OpenAI reports). A NaN logit counts as probability 0; a NaN or
 * -Infinity result is reported as {@link MIN_LOGPROB}. Three passes over the row (max, sum, top-n insertion); the row is not
 * modified.
 *
 * @example
 * positionLogprobs(new Float32Array([0, Math.log(3)]), 1, 2);
 * // { logprob: ln 0.75, top: [{ tokenId: 1, logprob: ln 0.75 }, { tokenId: 0, logprob: ln 0.25 }] }
 */
export function positionLogprobs(row: Float32Array, tokenId: number, topN: number): PositionLogprobs {
  let max = -Infinity;
  for (let i = 0; i < row.length; i++) if (row[i]! > max) max = row[i]!;
  let sum = 0;
  for (let i = 0; i < row.length; i++) {
    const e = Math.exp(row[i]! - max);
    if (e === e) sum += e; // a NaN logit counts as probability 0
  }
  const logZ = max + Math.log(sum);
  const at = (x: number) => clamp(x - logZ);
  return { logprob: at(row[tokenId]!), top: topIds(row, topN).map((id) => ({ tokenId: id, logprob: at(row[id]!) })) };
}

/**
 * A token frame's logprobs entry for a generated token: {@link positionLogprobs} of its logits row
 * with each id's text and bytes (`pieceOf`: the codec's `tokenPiece`).
 *
 * @example job.sink({ type: "token", tokenIds: [id], text, logprobs: [tokenLogprob(row, id, 5, codec.tokenPiece)] });
 */
export function tokenLogprob(row: Float32Array, tokenId: number, topN: number, pieceOf: (tokenId: number) => TokenPiece): TokenLogprob {
  const { logprob, top } = positionLogprobs(row, tokenId, topN);
  const piece = pieceOf(tokenId);
  return {
    token: piece.text,
    bytes: piece.bytes,
    logprob,
    topLogprobs: top.map((t) => {
      const p = pieceOf(t.tokenId);
      return { token: p.text, bytes: p.bytes, logprob: t.logprob };
    }),
  };
}

/**
 * The ids of the `n` largest values, largest first; equal values keep the lower id first. NaN
 * never ranks. One pass with an insertion into a sorted list of at most n (n <= 20 in practice).
 *
 * @example topIds(new Float32Array([1, 3, 3, 2]), 3) // [1, 2, 3]
 */
export function topIds(row: Float32Array, n: number): number[] {
  const ids: number[] = [];
  const values: number[] = [];
  if (n <= 0) return ids;
  for (let i = 0; i < row.length; i++) {
    const v = row[i]!;
    if (Number.isNaN(v)) continue;
    if (ids.length === n && !(v > values[n - 1]!)) continue;
    let j = ids.length === n ? n - 1 : ids.length;
    while (j > 0 && values[j - 1]! < v) {
      values[j] = values[j - 1]!;
      ids[j] = ids[j - 1]!;
      j--;
    }
    values[j] = v;
    ids[j] = i;
  }
  return ids;
}

function clamp(logprob: number): number {
  return logprob >= MIN_LOGPROB ? Math.min(logprob, 0) : MIN_LOGPROB;
}
