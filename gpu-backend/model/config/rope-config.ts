/**
 * Rotary position embeddings of a config: the scaling variants (`rope_scaling` or
 * `rope_parameters` in config.json) and the inverse frequencies they give, as transformers
 * computes them.
 */

/** Rotary scaling of a config. */
export type RopeScaling =
  | { ropeType: "linear"; factor: number }
  | {
      ropeType: "llama3";
      factor: number;
      lowFreqFactor: number;
      highFreqFactor: number;
      originalMaxPositionEmbeddings: number;
    }
  | {
      /**
       * Phi-3's LongRoPE: per-frequency divisors, `shortFactor` within the pretrained context and
       * `longFactor` beyond it, and cos/sin scaled by `attentionFactor`.
       */
      ropeType: "longrope";
      shortFactor: number[];
      longFactor: number[];
      originalMaxPositionEmbeddings: number;
      /** null: transformers' default, sqrt(1 + ln(max / original) / ln(original)) when max > original, else 1. */
      attentionFactor: number | null;
    };

/** What the rotary tables depend on. */
export interface RopeParams {
  headDim: number;
  /** Leading dimensions of each head that rotate (headDim x partial_rotary_factor); the rest pass through. */
  rotaryDim: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  maxPositionEmbeddings: number;
}

/**
 * Rotary inverse frequencies (length rotaryDim / 2) with the scaling applied, computed as
 * transformers does (`_compute_default_rope_parameters`, `_compute_linear_scaling_rope_parameters`,
 * `_compute_llama3_parameters`, `_compute_longrope_parameters`), each step rounded to float32 as
 * torch computes it in float32.
 *
 * Llama 3 scaling, with wavelen = 2π / invFreq, lowWavelen = original / lowFreqFactor and
 * highWavelen = original / highFreqFactor:
 *   wavelen < highWavelen            → invFreq              (high frequencies kept)
 *   wavelen > lowWavelen             → invFreq / factor     (low frequencies interpolated)
 *   otherwise, s = (original / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
 *                                    → (1 - s) · invFreq / factor + s · invFreq
 *
 * LongRoPE: invFreq_i / ext_i, with ext = longFactor when the served context (`servedContext`)
 * exceeds the pretrained one, else shortFactor. transformers switches per call on the sequence's
 * length, which would change the keys of a cached prefix once a conversation grows past the
 * pretrained context; like llama.cpp (which picks by its context size) we pick once, by the
 * longest context served, so cached KV stays valid.
 *
 * @example
 * const invFreq = ropeInvFreq(params, 32768); // Float32Array(params.rotaryDim / 2)
 */
export function ropeInvFreq(params: RopeParams, servedContext: number): Float32Array {
  const f = Math.fround;
  const dim = params.rotaryDim;
  const half = dim / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    out[i] = f(1 / f(Math.pow(params.ropeTheta, f((2 * i) / dim))));
  }
  const s = params.ropeScaling;
  if (s === null) return out;
  if (s.ropeType === "linear") {
    for (let i = 0; i < half; i++) out[i] = f(out[i]! / s.factor);
    return out;
  }
  if (s.ropeType === "longrope") {
    const ext = servedContext > s.originalMaxPositionEmbeddings ? s.longFactor : s.shortFactor;
    for (let i = 0; i < half; i++) out[i] = f(1 / f(f(ext[i]!) * f(Math.pow(params.ropeTheta, f((2 * i) / dim)))));
    return out;
  }
  const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  for (let i = 0; i < half; i++) {
    const invFreq = out[i]!;
    const wavelen = f((2 * Math.PI) / invFreq);
    if (wavelen < highFreqWavelen) continue;
    if (wavelen > lowFreqWavelen) {
      out[i] = f(invFreq / s.factor);
      continue;
    }
    const smooth = f(f(f(s.originalMaxPositionEmbeddings / wavelen) - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor));
    out[i] = f(f(f(f(1 - smooth) * invFreq) / s.factor) + f(smooth * invFreq));
  }
  return out;
}

/**
 * The factor cos and sin are multiplied by: LongRoPE's attention factor, 1 for the others.
 *
 * @example
 * ropeAttentionFactor(phi4MiniParams); // 1.19 for 131072 / 4096
 */
export function ropeAttentionFactor(params: RopeParams): number {
  const s = params.ropeScaling;
  if (s === null || s.ropeType !== "longrope") return 1;
  if (s.attentionFactor !== null) return s.attentionFactor;
  const factor = params.maxPositionEmbeddings / s.originalMaxPositionEmbeddings;
  return factor <= 1 ? 1 : Math.sqrt(1 + Math.log(factor) / Math.log(s.originalMaxPositionEmbeddings));
}

/**
 * Reads `rope_scaling` (or `rope_parameters`). `originalMax` is the config's top-level
 * `original_max_position_embeddings` (Phi-3 keeps it there), used when the object has none.
 */
export function parseRopeScaling(
  raw: unknown,
  key: string,
  ctx: { rotaryDim: number; originalMax: number | undefined },
  fail: (detail: string) => never,
): RopeScaling | null {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) return fail(`${key} must be an object or null`);
  const r = raw as Record<string, unknown>;
  const type = r.rope_type ?? r.type;
  if (type === undefined || type === null || type === "default") return null;
  const num = (name: string): number => {
    const v = r[name];
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail(`${key}.${name} must be a positive number`);
    return v;
  };
  if (type === "linear") return { ropeType: "linear", factor: num("factor") };
  if (type === "llama3") {
    const scaling: RopeScaling = {
      ropeType: "llama3",
      factor: num("factor"),
      lowFreqFactor: num("low_freq_factor"),
      highFreqFactor: num("high_freq_factor"),
      originalMaxPositionEmbeddings: num("original_max_position_embeddings"),
    };
    if (scaling.highFreqFactor <= scaling.lowFreqFactor) fail(`${key}.high_freq_factor must be greater than low_freq_factor`);
    return scaling;
  }
  if (type === "longrope" || type === "su") {
    const factors = (name: string): number[] => {
      const v = r[name];
      const n = ctx.rotaryDim / 2;
      if (!Array.isArray(v) || v.length !== n || !v.every((x) => typeof x === "number" && Number.isFinite(x) && x > 0)) {
        return fail(`${key}.${name} must be a list of ${n} positive numbers (rotary dimensions / 2)`);
      }
      return v as number[];
    };
    const original = r.original_max_position_embeddings ?? ctx.originalMax;
    if (typeof original !== "number" || !Number.isInteger(original) || original <= 0) {
      return fail(`${key} of type longrope needs original_max_position_embeddings (here or at the top level)`);
    }
    const attention = r.attention_factor;
    if (attention !== undefined && attention !== null && (typeof attention !== "number" || !(attention > 0))) {
      fail(`${key}.attention_factor must be a positive number`);
    }
    return {
      ropeType: "longrope",
      shortFactor: factors("short_factor"),
      longFactor: factors("long_factor"),
      originalMaxPositionEmbeddings: original,
      attentionFactor: (attention as number | null | undefined) ?? null,
    };
  }
  return fail(`${key}.rope_type ${JSON.stringify(type)} is not supported (supported: default, linear, llama3, longrope)`);
}

/** The scaling as config.json writes it (inverse of `parseRopeScaling`). */
export function ropeScalingToJson(s: RopeScaling | null): Record<string, unknown> | null {
  if (s === null) return null;
  if (s.ropeType === "linear") return { rope_type: "linear", factor: s.factor };
  if (s.ropeType === "longrope") {
    return {
      rope_type: "longrope",
      short_factor: s.shortFactor,
      long_factor: s.longFactor,
      original_max_position_embeddings: s.originalMaxPositionEmbeddings,
      ...(s.attentionFactor === null ? {} : { attention_factor: s.attentionFactor }),
    };
  }
  return {
    rope_type: "llama3",
    factor: s.factor,
    low_freq_factor: s.lowFreqFactor,
    high_freq_factor: s.highFreqFactor,
    original_max_position_embeddings: s.originalMaxPositionEmbeddings,
  };
}
