import { describe, expect, it } from "vitest";
import { Sampler } from "./sampler";

/**
 * Speculative verification's rejection rule, alone on a six-token vocabulary: over many seeds,
 * the token `verify` returns for a drafted token is distributed as `sample`'s distribution (the
 * temperature, top-k and top-p processed softmax), whatever the draft: the model's, not the
 * draft's. No model runs: the rule is the whole of what sampling with speculation changes.
 */
describe("Sampler.verify: the output distribution is the model's", () => {
  const logits = Float32Array.of(2.0, 1.5, 0.3, -0.4, 1.1, -3);
  const params = { temperature: 0.8, topP: 0.97, topK: 5 };
  const N = 40_000;

  /** Chi-square of the counts against `p` (cells with p = 0 must be empty) and the total-variation distance. */
  function fit(counts: number[], p: Float64Array): { chi2: number; tv: number; df: number } {
    let chi2 = 0;
    let tv = 0;
    let df = -1;
    for (let i = 0; i < p.length; i++) {
      if (p[i] === 0) {
        expect(counts[i], `token ${i} has probability 0`).toBe(0);
        continue;
      }
      df++;
      const e = N * p[i]!;
      chi2 += (counts[i]! - e) ** 2 / e;
      tv += Math.abs(counts[i]! / N - p[i]!) / 2;
    }
    return { chi2, tv, df };
  }

  const p = new Sampler({ ...params, seed: 0 }).probabilities(logits);

  it("the processed distribution: top-k and top-p cut, renormalized", () => {
    expect(p[5]).toBe(0); // outside the top 5
    expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    expect(p[0]).toBeGreaterThan(p[1]!);
  });

  for (const draft of [0, 2, 3, 5]) {
    it(`drafting token ${draft} (p = ${p[draft]!.toFixed(3)}): accepted with probability p(draft), output distributed as p`, () => {
      const counts = new Array<number>(logits.length).fill(0);
      for (let seed = 0; seed < N; seed++) counts[new Sampler({ ...params, seed }).verify(logits, draft)]!++;
      const { chi2, tv, df } = fit(counts, p);
      // df <= 4: chi-square above 25 has probability < 5e-5 under the null.
      expect(chi2, `chi-square ${chi2.toFixed(2)} on ${df} degrees of freedom`).toBeLessThan(25);
      expect(tv).toBeLessThan(0.01);
      expect(counts[draft]! / N).toBeCloseTo(p[draft]!, 1);
    });
  }

  it("a rule that keeps the draft on rejection (resampling from p without removing it) fails the same check", () => {
    // The control: the test has the power to see a wrong rule (it over-weights the draft).
    const counts = new Array<number>(logits.length).fill(0);
    const draft = 2;
    for (let seed = 0; seed < N; seed++) {
      const s = new Sampler({ ...params, seed });
      const t = s.verify(logits, draft);
      counts[t === draft ? draft : new Sampler({ ...params, seed: seed + N }).sample(logits)]!++;
    }
    expect(fit(counts, p).chi2).toBeGreaterThan(100);
  });

  it("greedy verification keeps the draft only where it is the argmax, and is reproducible per seed", () => {
    const greedy = new Sampler({ temperature: 0, topP: 1, topK: 0, seed: 1 });
    expect(greedy.verify(logits, 0)).toBe(0);
    expect(greedy.verify(logits, 1)).toBe(0);
    const a = new Sampler({ ...params, seed: 7 });
    const b = new Sampler({ ...params, seed: 7 });
    const draws = (s: Sampler) => Array.from({ length: 32 }, (_, i) => s.verify(logits, i % 6));
    expect(draws(a)).toEqual(draws(b));
  });
});

describe("Sampler.sample without top-k / top-p (the softmax draw)", () => {
  it("draws as the softmax at the temperature, never a masked (-Infinity) entry, one buffer reused across rows", () => {
    const N = 40_000;
    const logits = Float32Array.of(2.0, -Infinity, 1.5, 0.3, -Infinity, -0.4, 1.1);
    const params = { temperature: 0.8, topP: 1, topK: 0 };
    const p = new Sampler({ ...params, seed: 0 }).probabilities(logits);
    expect([p[1], p[4]]).toEqual([0, 0]);
    const counts = new Array<number>(logits.length).fill(0);
    const sampler = new Sampler({ ...params, seed: 7 });
    for (let i = 0; i < N; i++) counts[sampler.sample(i % 2 ? logits : Float32Array.from(logits))]!++;
    expect([counts[1], counts[4]]).toEqual([0, 0]);
    let chi2 = 0;
    for (let i = 0; i < p.length; i++) if (p[i]! > 0) chi2 += (counts[i]! - N * p[i]!) ** 2 / (N * p[i]!);
    // 4 degrees of freedom: above 25 has probability < 5e-5 under the null.
    expect(chi2).toBeLessThan(25);
    // A longer row after a shorter one, and the same seed gives the same draws.
    const wide = Float32Array.from({ length: 1000 }, (_, i) => (i === 999 ? 50 : -Infinity));
    expect(new Sampler({ ...params, seed: 3 }).sample(wide)).toBe(999);
    expect(sampler.sample(wide)).toBe(999);
    const again = new Sampler({ ...params, seed: 7 });
    expect(Array.from({ length: 50 }, () => again.sample(logits))).toEqual(Array.from({ length: 50 }, (() => { const s = new Sampler({ ...params, seed: 7 }); return () => s.sample(logits); })()));
  });

  it("a peaked row, where most rejection draws fail and the full draw runs, still draws as the softmax", () => {
    // 3 entries near the top and 1,997 at -12: a rejection try keeps an entry with probability
    // ~(1 + e^-1 + e^-2) / 2,000 = 7.6e-4, so ~18% of draws end in the rejection tries and the rest
    // in the full draw; the mixture must be the softmax.
    const N = 20_000;
    const logits = Float32Array.from({ length: 2000 }, (_, i) => (i < 3 ? -i : -12));
    const params = { temperature: 1, topP: 1, topK: 0 };
    const p = new Sampler({ ...params, seed: 0 }).probabilities(logits);
    const expected = [p[0]!, p[1]!, p[2]!, 1 - p[0]! - p[1]! - p[2]!];
    const counts = [0, 0, 0, 0];
    const sampler = new Sampler({ ...params, seed: 11 });
    for (let i = 0; i < N; i++) counts[Math.min(3, sampler.sample(logits))]!++;
    let chi2 = 0;
    for (let i = 0; i < 4; i++) chi2 += (counts[i]! - N * expected[i]!) ** 2 / (N * expected[i]!);
    // 3 degrees of freedom: above 22 has probability < 1e-4 under the null.
    expect(chi2).toBeLessThan(22);
  });
});
