/** A prefill chunk as attention sees it: its new tokens and the context positions it attends to. */
export interface PrefillChunk {
  /** New tokens. */
  chunk: number;
  /** Context tokens it sees (its start position, or its sliding window's share of it). */
  context: number;
}

/**
 * How the cpu executor lays out a step's prefill chunks for attention (cpu-prefill-feeds.ts,
 * llama-graph.ts `prefillAttention`): in bundles, each bundle its chunks' contexts one after
 * another, then their new tokens, every bundle padded to the widest.
 * - one bundle of all chunks: no padding, but every query is scored against every chunk's
 *   context (masked): (sum of chunks) x (sum of contexts + sum of chunks);
 * - one bundle per chunk: each query only against its own context, but every chunk padded to
 *   the longest chunk and the longest context: B x Tm x (Sm + Tm).
 * 8 agent turns of 300 new tokens after 2,000 context tokens each: 44.2 M scores a head in one
 * bundle, 5.5 M in eight; a 2,000-token prompt beside a 10-token turn after 5,000: 14.1 M in one,
 * 28.0 M in two. The layout with fewer scores (what attention's time follows) is chosen.
 *
 * @example
 * prefillBundles([{ chunk: 300, context: 2000 }, { chunk: 300, context: 2000 }]); // [[0], [1]]
 */
export function prefillBundles(chunks: readonly PrefillChunk[]): number[][] {
  const { together, apart } = layoutScores(chunks);
  return apart < together ? chunks.map((_, i) => [i]) : [chunks.map((_, i) => i)];
}

/** Score entries of each layout (see `prefillBundles`). */
function layoutScores(chunks: readonly PrefillChunk[]): { together: number; apart: number } {
  let tokens = 0;
  let context = 0;
  let tm = 0;
  let sm = 0;
  for (const c of chunks) {
    tokens += c.chunk;
    context += c.context;
    tm = Math.max(tm, c.chunk);
    sm = Math.max(sm, c.context);
  }
  return { together: tokens * (context + tokens), apart: chunks.length * tm * (sm + tm) };
}

/**
 * Attention cost of the step's prefill group, in the layout the executor picks
 * (`prefillBundles`): `scores` is what the chunks would compute each attending alone,
 * sum n x (context + n); `extraScores` what the layout computes on top (masked columns of other
 * chunks, or padding). Another prefill chunk joins the step only while that stays within
 * `wastePerToken` entries per prefill token (see SchedulerConfig); otherwise it runs next step.
 * Decode tokens (one per sequence) are batched separately and always join. Step traces count a
 * step's attention work with it too (`stepRecord`).
 *
 * @example
 * const group = new PrefillGroupCost(Infinity);
 * group.add(10, 4); group.add(20, 2);
 * group.scores;      // 100: 4 x 14 + 2 x 22
 * group.extraScores; // 92: apart, 2 x 4 x (20 + 4) - 100 (together: 6 x (30 + 6) - 100 = 116)
 */
export class PrefillGroupCost {
  private readonly chunks: PrefillChunk[] = [];
  private ideal = 0;

  constructor(private readonly wastePerToken: number) {}

  /** Score entries of the group's chunks, each attending alone. */
  get scores(): number {
    return this.ideal;
  }

  /** Score entries the executor's layout computes on top of `scores`. */
  get extraScores(): number {
    return this.layout(this.chunks) - this.ideal;
  }

  admits(startPos: number, numTokens: number): boolean {
    if (numTokens <= 1 || this.chunks.length === 0) return true;
    const tokens = this.chunks.reduce((a, c) => a + c.chunk, numTokens);
    const extra = this.layout([...this.chunks, { chunk: numTokens, context: startPos }]) - this.ideal - numTokens * (startPos + numTokens);
    return extra <= this.wastePerToken * tokens;
  }

  add(startPos: number, numTokens: number): void {
    if (numTokens <= 1) return;
    this.chunks.push({ chunk: numTokens, context: startPos });
    this.ideal += numTokens * (startPos + numTokens);
  }

  private layout(chunks: readonly PrefillChunk[]): number {
    const { together, apart } = layoutScores(chunks);
    return Math.min(together, apart);
  }
}
