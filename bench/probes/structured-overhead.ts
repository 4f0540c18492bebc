/**
 * What constrained decoding costs per generated token on a model whose distribution is peaked:
 * the same prompts answered greedily with and without a `json_schema` constraint, decode time per
 * generated token from the done frame's timings (prefill excluded), on the cpu executor.
 *
 *   npx tsx bench/probes/structured-overhead.ts [--model smollm2] [--rounds 3]
 *
 * Prints, per mode, tokens generated, ms per token (median over rounds) and the ratio; and
 * whether each constrained reply parses. (The retired `structured` bench measured the same on the
 * random demo model, whose flat distribution the grammar cuts far more often.)
 */
import { parseArgs } from "node:util";
import { loadModel } from "../../gpu-backend/engine/load-model";
import { benchEngine, benchExecutor, benchWeights, submitTurn } from "../kit/engine";
import { note } from "../kit/progress";
import type { GenerateRequest } from "../../protocol/messages";

const { values } = parseArgs({ options: { model: { type: "string", default: "smollm2" }, rounds: { type: "string", default: "3" } } });
const model = await loadModel({ dir: values.model, log: (l) => note("structured", l) });
const weights = benchWeights(model, undefined, (l) => note("structured", l));
const executor = await benchExecutor(model, weights, 256);
const engine = benchEngine(model, executor, { numBlocks: 256 });
const PERSON = { type: "object", properties: { name: { type: "string" }, age: { type: "integer" }, city: { type: "string" }, hobbies: { type: "array", items: { type: "string" } } }, required: ["name", "age", "city", "hobbies"], additionalProperties: false };
const prompts = ["Alice, 30, lives in Paris and likes chess and tennis.", "Bob is 45, from Berlin; he paints and cooks.", "Chen, 22, Shanghai, enjoys running, music and go."];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

const perMode: Record<"free" | "constrained", number[]> = { free: [], constrained: [] };
let tokens = { free: 0, constrained: 0 };
let parsed = 0;
for (let r = 0; r < Number(values.rounds); r++) {
  for (const [i, text] of prompts.entries()) {
    for (const mode of ["free", "constrained"] as const) {
      const req: GenerateRequest = {
        requestId: `${mode}-${r}-${i}`,
        mode: "full",
        messages: [{ role: "user", content: `Give this person as JSON with name, age, city and hobbies: ${text}` }],
        sampling: { maxTokens: 64, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [] },
        ...(mode === "constrained" ? { constraint: { type: "json_schema" as const, schema: PERSON, strict: true } } : {}),
      };
      const { done } = await submitTurn(engine, req);
      const n = done.usage.completionTokens;
      tokens[mode] += n;
      if (n > 1) perMode[mode].push(done.timings.decodeMs / (n - 1));
      if (mode === "constrained" && r === 0) {
        try {
          JSON.parse(done.text);
          parsed++;
        } catch {
          note("structured", `does not parse: ${done.text}`);
        }
      }
    }
  }
}
const free = median(perMode.free);
const constrained = median(perMode.constrained);
console.log(JSON.stringify({ model: model.spec.modelId, weights: weights.precision, tokens, msPerTokenFree: +free.toFixed(2), msPerTokenConstrained: +constrained.toFixed(2), overhead: +(constrained / free).toFixed(3), constrainedRepliesParsed: `${parsed}/${prompts.length}` }));
await executor.dispose();
