import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadModel, type LoadedModel } from "../../gpu-backend/engine/load-model";
import { DEMO_FAMILIES, TOKENIZER_OF, tinyFamilyConfig, type DemoFamily } from "../../gpu-backend/model/checkpoint/demo-families";
import { materializeModel } from "../../gpu-backend/model/checkpoint/demo-model";
import { writeFamilyTokenizer } from "../../gpu-backend/model/checkpoint/family-tokenizers";
import { accuracyCorpus, accuracyPrompts, precisionAccuracy, type AccuracyFigures } from "./precision-accuracy";
import { note } from "../kit/progress";

/**
 * Weights ~N(0, 0.08²): at the materializer's default 0.02 the next-token distributions are nearly
 * flat and any KL is tiny; at 0.5 the random network is chaotic and int8 already flips most tokens.
 */
export const ACCURACY_WEIGHT_STD = 0.08;

/**
 * The tiny checkpoint of a demo family with weights at ACCURACY_WEIGHT_STD, materialized under
 * `root` (the family's own tokenizer), loaded.
 *
 * @example const model = await accuracyModel("phi3", mkdtempSync(join(tmpdir(), "acc-")));
 */
export async function accuracyModel(family: DemoFamily, root: string): Promise<LoadedModel> {
  const tokDir = join(root, `tok-${TOKENIZER_OF[family]}`);
  const info = await writeFamilyTokenizer(TOKENIZER_OF[family], tokDir);
  const dir = await materializeModel({ dir: join(root, family), config: tinyFamilyConfig(family, info), seed: 21, weightStd: ACCURACY_WEIGHT_STD, tokenizerFrom: tokDir });
  return loadModel({ dir });
}

/**
 * `npm run bench -- accuracy [--json] [--families a,b] [--model DIR]`: int8 and int4 against
 * float32, each with its prefill rows on MatMulNBits (`nbits`) and on the integer GEMM
 * (`integer`; the cpu executor's default at int4), keyed `int4/integer` etc., per demo family
 * (default all) on each family's tiny checkpoint (accuracyModel), or on the model `--model`
 * names (e.g. `smollm2`, the trained test model): mean and max KL of the next-token distribution
 * over the 2,000-token agent-text corpus, greedy agreement over 4 prompts x 128 tokens
 * (precision-accuracy.ts). Random weights compare precisions and families, not a trained model's
 * quality; the trained model does.
 */
export async function runAccuracyBench(o: { families?: DemoFamily[]; model?: string }): Promise<Record<string, Record<string, AccuracyFigures> | { error: string }>> {
  const families: string[] = o.model ? [o.model] : (o.families ?? [...DEMO_FAMILIES]);
  const root = mkdtempSync(join(tmpdir(), "accuracy-bench-"));
  const out: Record<string, Record<string, AccuracyFigures> | { error: string }> = {};
  try {
    for (const [i, family] of families.entries()) {
      note("accuracy", `model ${i + 1}/${families.length}: ${family}`);
      const model = o.model ? await loadModel({ dir: o.model }) : await accuracyModel(family as DemoFamily, root);
      let corpus: number[];
      let prompts: number[][];
      try {
        corpus = accuracyCorpus(model.codec, 2000);
        prompts = accuracyPrompts(model.codec);
      } catch (e) {
        // A chat template may refuse the corpus transcript (Gemma 3's: roles must alternate).
        note("accuracy", `${family}: no corpus: ${(e as Error).message}`);
        out[family] = { error: (e as Error).message };
        continue;
      }
      out[family] = {};
      for (const bits of [8, 4] as const) {
        for (const integerPrefill of [false, true]) {
          const key = `int${bits}/${integerPrefill ? "integer" : "nbits"}`;
          const f = await precisionAccuracy({ spec: model.spec, weights: model.weights, bits, integerPrefill, corpus, prompts, onProgress: (l) => note("accuracy", `${family} ${key} ${l}`) });
          note("accuracy", `${family} ${key}: mean KL ${f.meanKl.toExponential(2)} nats (max ${f.maxKl.toExponential(2)}), greedy agreement ${f.greedyAgreement.toFixed(3)}`);
          (out[family] as Record<string, AccuracyFigures>)[key] = f;
        }
      }
    }
    return out;
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}
