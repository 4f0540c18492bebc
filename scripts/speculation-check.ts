/**
 * A quick check of speculative decoding on the trained model (not the bench: `npm run bench --
 * speculative` is that): a copying turn (repeat a JSON object from the prompt) and a free-text
 * turn, greedy at batch 1 on the CPU executor, with and without speculation (`--speculative
 * lookup|suffix`, adaptive length, or `fixed`); prints decode tokens/s, acceptance and tokens per
 * step, and whether the outputs are identical.
 *
 * With a batch size, also that many copying turns at once (wall-clock throughput, prefill included).
 *
 * @example AGENT_EDGE_CACHE_DIR=/work/main/.cache npx tsx scripts/speculation-check.ts [threads] [lookup|suffix] [maxDraft] [fixed|adaptive] [batch]
 */
import { createEngine } from "../gpu-backend/engine/create-engine";
import { loadModel } from "../gpu-backend/engine/load-model";
import { speculationFor } from "../gpu-backend/engine/speculation";
import { BlockPool } from "../gpu-backend/kv/block-pool";
import { CpuExecutor } from "../gpu-backend/model/executors/cpu-executor";

const threads = Number(process.argv[2] ?? 1);
const mode = (process.argv[3] ?? "lookup") as "lookup" | "suffix";
const maxDraft = Number(process.argv[4] ?? 8);
const speculative = { ...speculationFor(mode, maxDraft)!, adaptive: process.argv[5] !== "fixed" };
const model = await loadModel({ dir: "smollm2" });
const executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 512, blockSize: 16, threads });
const engine = createEngine({
  executor, pool: new BlockPool({ numBlocks: 512, blockSize: 16 }), codec: model.codec, modelId: model.spec.modelId,
  scheduler: { maxBatchTokens: 512, maxRunningSequences: 8, blockSize: 16 }, enablePrefixCache: true, backendId: "check",
  speculative,
});
const record = { id: "call_8f3a2c91", path: "/srv/app/config/settings.yaml", owner: "deploy-bot", retries: 3, tags: ["prod", "eu-west-1", "canary"], checksum: "sha256:4be1c0ffee9d2a7e" };
const turns = {
  copy: `Here is the record from the tool:\n${JSON.stringify(record, null, 2)}\nRepeat this JSON object exactly, nothing else.`,
  free: "Write a short story about a robot who learns to paint.",
};
const prompt = (text: string) => model.codec.encode(model.codec.render({ messages: [{ role: "user", content: text }], tools: [], addGenerationPrompt: true }));
const sampling = { maxTokens: 96, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: false };

async function run(tokenIds: number[], speculative: boolean, salt: string) {
  const steps0 = engine.counters.steps;
  const r = await engine.generateTokens({ tokenIds, sampling, cacheSalt: salt, speculative });
  const decodeTokens = r.tokenIds.length - 1;
  return { ids: r.tokenIds, tokS: decodeTokens / (r.timings.decodeMs / 1000), steps: engine.counters.steps - steps0 - 1, decodeTokens, spec: r.speculation };
}

await run(prompt("Hello"), false, "warmup");
for (const [name, text] of Object.entries(turns)) {
  const ids = prompt(text);
  const off: Awaited<ReturnType<typeof run>>[] = [];
  const on: Awaited<ReturnType<typeof run>>[] = [];
  // Each run under its own salt: the prompt is prefilled every time (the same work both ways).
  for (let i = 0; i < 3; i++) {
    off.push(await run(ids, false, `${name}-off-${i}`));
    on.push(await run(ids, true, `${name}-on-${i}`));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const a = median(off.map((r) => r.tokS));
  const b = median(on.map((r) => r.tokS));
  const s = on[0]!;
  const identical = on.every((r) => JSON.stringify(r.ids) === JSON.stringify(off[0]!.ids)) && off.every((r) => JSON.stringify(r.ids) === JSON.stringify(off[0]!.ids));
  console.log(`${name}: ${s.decodeTokens + 1} tokens, prompt ${ids.length}; decode ${a.toFixed(1)} tok/s off, ${b.toFixed(1)} tok/s ${mode} (x${(b / a).toFixed(2)}); accepted ${s.spec!.accepted}/${s.spec!.drafted} drafted (${((100 * s.spec!.accepted) / Math.max(1, s.spec!.drafted)).toFixed(0)}%); decode steps ${off[0]!.steps} -> ${s.steps} (${(s.decodeTokens / Math.max(1, s.steps)).toFixed(2)} tokens/step); outputs identical: ${identical}`);
}
// Batch: `batch` copying turns at once (each its own record and salt), generated tokens per second of wall time, prefill included.
const batch = Number(process.argv[6] ?? 1);
if (batch > 1) {
  const prompts = Array.from({ length: batch }, (_, i) => prompt(turns.copy.replaceAll("8f3a2c91", `8f3a2c${10 + i}`).replaceAll("retries\": 3", `retries": ${i}`)));
  for (const on of [false, true, false, true]) {
    const t0 = performance.now();
    const rs = await Promise.all(prompts.map((ids, i) => engine.generateTokens({ tokenIds: ids, sampling, cacheSalt: `batch-${on}-${i}-${t0}`, speculative: on })));
    const tokens = rs.reduce((a, r) => a + r.tokenIds.length, 0);
    const spec = rs.reduce((a, r) => [a[0]! + (r.speculation?.accepted ?? 0), a[1]! + (r.speculation?.drafted ?? 0)], [0, 0]);
    console.log(`batch ${batch} copy, ${on ? mode : "off"}: ${tokens} tokens in ${(performance.now() - t0).toFixed(0)} ms, ${((tokens / (performance.now() - t0)) * 1000).toFixed(1)} tok/s${on ? `, accepted ${spec[0]}/${spec[1]}` : ""}`);
  }
}
console.log(`threads ${threads}, ${mode}, max draft ${maxDraft}, ${speculative.adaptive ? "adaptive" : "fixed"}: ${JSON.stringify(model.codec.decode((await run(prompt(turns.copy), false, "show")).ids))}`);
await executor.dispose();
