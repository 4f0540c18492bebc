import { describe, expect, it } from "vitest";
import type { SpeculationOptions } from "./speculation";
import { BLOCK, engineFixture, greedy, prompt, turn } from "./engine-test-fixture";
import type { DraftContext, DraftSource } from "../speculative/draft-source";
import { SequenceLookup } from "../speculative/sequence-lookup";

/**
 * Speculative decoding in the engine (docs/engine.md, "Speculative decoding"): whatever the
 * drafts, outputs are the ones without speculation.
 */
const fx = engineFixture();
const makeEngine = fx.makeEngine;
/**
 * Test-only draft sources: `known` proposes what follows the context in a sequence (a reply
 * generated before: the true continuation, so every draft is accepted), `wrong` the same tokens
 * each shifted by one (never the model's token); `source` is the one the engine asks.
 */
class Drafts implements DraftSource {
  source: "lookup" | "known" | "wrong" = "lookup";
  full: readonly number[] = [];
  private readonly lookup = new SequenceLookup();
  propose(c: DraftContext, max: number): number[] {
    if (this.source === "lookup") return this.lookup.propose(c, max);
    const L = c.tokenIds.length;
    if (c.tokenIds.some((t, i) => this.full[i] !== t)) return [];
    const next = this.full.slice(L, L + max);
    return this.source === "known" ? next : next.map((t) => (t + 1) % fx.model().spec.vocabSize);
  }
}

describe("Engine: speculative decoding never changes an answer", () => {
  it("gives bit-identical greedy outputs with prompt lookup, true and wrong drafts, cache cold and warm; rollback keeps the KV invariants and later reuse", async () => {
    const drafts = new Drafts();
    const spec: SpeculationOptions = { source: drafts, maxDraftTokens: 5 };
    const { engine, executor } = await makeEngine({ speculative: spec });
    const p = [...prompt(20), ...prompt(20)]; // repeats: prompt lookup has something to draft
    const want = await engine.generateTokens({ tokenIds: p, sampling: greedy(40), cacheSalt: "plain", speculative: false });
    expect(want.speculation).toBeUndefined();
    drafts.full = [...p, ...want.tokenIds];
    // The next turn extends the reply: after a speculative turn it finds the cached prefix it finds after a plain one.
    const next = [...p, ...want.tokenIds, 7, 8, 9];
    const plain = await engine.generateTokens({ tokenIds: next, sampling: greedy(1), cacheSalt: "plain", speculative: false });
    expect(plain.usage.cachedTokens).toBe(Math.floor((p.length + want.tokenIds.length - 1) / BLOCK) * BLOCK);
    for (const source of ["lookup", "known", "wrong"] as const) {
      drafts.source = source;
      for (const warmth of ["cold", "warm"]) {
        const steps = executor.steps.length;
        const got = await engine.generateTokens({ tokenIds: p, sampling: greedy(40), cacheSalt: source });
        expect(got.tokenIds, `${source} ${warmth}`).toEqual(want.tokenIds);
        expect(got.usage.cachedTokens).toBe(warmth === "cold" ? 0 : 32);
        engine.kv.checkInvariants();
        const { drafted, accepted } = got.speculation!;
        expect(drafted).toBeGreaterThan(0);
        if (source === "known") {
          expect(accepted).toBe(drafted); // acceptance 100%: 6 tokens per step (1 + 5)
          expect(executor.steps.length - steps).toBeLessThanOrEqual(2 + Math.ceil(40 / 6));
        }
        if (source === "wrong") expect(accepted).toBe(0);
        // Greedy without logprobs: a verify run fetches each row's argmax, never the logits rows.
        const verifies = executor.steps.slice(steps).flatMap((s, k) => s.sequences.map((q, i) => ({ q, rows: executor.rows[steps + k]![i]! })).filter(({ q }) => q.verify));
        expect(verifies.length).toBeGreaterThan(0);
        for (const { q, rows } of verifies) {
          expect(q.logits).toBe("argmax-all");
          expect(rows.length).toBe(0);
          expect(q.tokenIds.length).toBeLessThanOrEqual(6);
        }
      }
      const after = await engine.generateTokens({ tokenIds: next, sampling: greedy(1), cacheSalt: source, speculative: false });
      expect(after.usage.cachedTokens).toBe(plain.usage.cachedTokens);
    }
    // The adaptive length: wrong drafts turn drafting (nearly) off, true ones grow it; the output is the same.
    const fixedWrong = (await engine.generateTokens({ tokenIds: p, sampling: greedy(40), cacheSalt: "wrong" })).speculation!.drafted;
    spec.adaptive = true;
    const adaptive = await engine.generateTokens({ tokenIds: p, sampling: greedy(40), cacheSalt: "wrong" });
    expect(adaptive.tokenIds).toEqual(want.tokenIds);
    expect(adaptive.speculation!.drafted).toBeLessThan(fixedWrong / 4);
    drafts.source = "known";
    const grown = await engine.generateTokens({ tokenIds: p, sampling: greedy(40), cacheSalt: "known" });
    expect(grown.tokenIds).toEqual(want.tokenIds);
    expect(grown.speculation!.accepted).toBe(grown.speculation!.drafted);
    expect(grown.speculation!.drafted).toBeGreaterThan(20); // of 39 tokens after the first: the length grew from 2
    const c = engine.counters.speculation;
    expect(c.verifies).toBe(c.byLength.verifies.reduce((a, n) => a + (n ?? 0), 0));
    expect(engine.kv.numSequences).toBe(0);
    expect(engine.kv.numFreeBlocks).toBe(engine.options.pool.numBlocks);
  });

  it("keeps logprobs, stop strings and budgets identical, and batches sequences with their own draft lengths", async () => {
    const drafts = new Drafts();
    const { engine, executor } = await makeEngine({ speculative: { source: drafts, maxDraftTokens: 4 }, maxBatchTokens: 32 });
    const p = [...prompt(24, 5), ...prompt(24, 5)];
    const sampling = greedy(24, { logprobs: 2 });
    const want = await engine.generateTokens({ tokenIds: p, sampling, speculative: false });
    drafts.full = [...p, ...want.tokenIds];
    drafts.source = "known";
    const before = executor.steps.length;
    const got = await engine.generateTokens({ tokenIds: p, sampling, cacheSalt: "s" });
    expect(got.tokenIds).toEqual(want.tokenIds);
    // Logprobs need the rows: these verify runs fetch every row's logits.
    const modes = executor.steps.slice(before).flatMap((s) => s.sequences.filter((q) => q.verify).map((q) => q.logits));
    expect(modes.length).toBeGreaterThan(0);
    expect(new Set(modes)).toEqual(new Set(["all"]));
    expect(got.logprobs!.map((l) => [l.token, l.topLogprobs.map((t) => t.token)])).toEqual(want.logprobs!.map((l) => [l.token, l.topLogprobs.map((t) => t.token)]));
    got.logprobs!.forEach((l, i) => expect(l.logprob).toBeCloseTo(want.logprobs![i]!.logprob, 4));
    expect(got.speculation!.accepted).toBe(got.speculation!.drafted);

    const text = fx.model().codec.decode(want.tokenIds);
    const stop = text.slice(9, 12);
    const stopped = await engine.generateTokens({ tokenIds: p, sampling: greedy(24, { stop: [stop] }), cacheSalt: "t" });
    const plain = await engine.generateTokens({ tokenIds: p, sampling: greedy(24, { stop: [stop] }), cacheSalt: "u", speculative: false });
    expect(stopped.finishReason).toBe("stop_sequence");
    expect(stopped.tokenIds).toEqual(plain.tokenIds);
    for (const max of [1, 2, 7]) expect((await engine.generateTokens({ tokenIds: p, sampling: greedy(max) })).tokenIds).toEqual(want.tokenIds.slice(0, max));

    // Sampling: the rejection rule runs in the engine, and a seed still reproduces the reply.
    drafts.source = "lookup";
    const sampled = greedy(16, { temperature: 0.8, topK: 20, seed: 3 });
    const s1 = await engine.generateTokens({ tokenIds: p, sampling: sampled, cacheSalt: "w" });
    const s2 = await engine.generateTokens({ tokenIds: p, sampling: sampled, cacheSalt: "w" });
    expect(s2.tokenIds).toEqual(s1.tokenIds);
    expect(s1.speculation!.drafted).toBeGreaterThan(0);

    // Three sequences at once under a 32-token budget: each verifies its own draft, never past the budget.
    const many = [0, 1, 2].map((k) => [...prompt(20, k * 50), ...prompt(20, k * 50)]);
    const alone = await Promise.all(many.map((q) => engine.generateTokens({ tokenIds: q, sampling: greedy(16), speculative: false })));
    const steps = executor.steps.length;
    const together = await Promise.all(many.map((q) => engine.generateTokens({ tokenIds: q, sampling: greedy(16), cacheSalt: "v" })));
    expect(together.map((r) => r.tokenIds)).toEqual(alone.map((r) => r.tokenIds));
    for (const s of executor.steps.slice(steps)) expect(s.sequences.reduce((a, q) => a + q.tokenIds.length, 0)).toBeLessThanOrEqual(32);
    engine.kv.checkInvariants();
  });
});
