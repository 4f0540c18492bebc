import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { DoneFrame, Frame, GenerateRequest, ReplyDelta, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { tinyFamilyConfig, type DemoFamily } from "../model/checkpoint/demo-families";
import { materializeModel } from "../model/checkpoint/demo-model";
import { writeFamilyTokenizer, type TokenizerFamily } from "../model/checkpoint/family-tokenizers";
import { loadModel } from "./load-model";
import type { Engine } from "./engine";
import { createEngine } from "./create-engine";
import { ScriptedExecutor } from "./testing/scripted-executor";
import { replyDeltasMismatch, sumReplyDeltas } from "../tokenizer/reply-deltas";
import { SequenceLookup } from "../speculative/sequence-lookup";

/**
 * Each family's tiny checkpoint with its own tokenizer and chat template, served by the engine:
 * a turn whose reply is a tool call in the family's syntax comes back as a parsed OpenAI tool
 * call, and the next turn (the tool's result) extends the prompt with the generated ids and is
 * served from the cached prefix.
 */
const root = mkdtempSync(join(tmpdir(), "family-turns-"));
const executors: CpuExecutor[] = [];
afterAll(async () => {
  for (const e of executors) await e.dispose();
  rmSync(root, { recursive: true, force: true });
});

const BLOCK = 16;
const greedy = (maxTokens: number): SamplingParams => ({ maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: false });
const tools: ToolDefinition[] = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } },
];

const CASES: { family: DemoFamily; tokenizer: TokenizerFamily; reply: string; endOfTurn: string }[] = [
  { family: "qwen3", tokenizer: "qwen3", reply: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', endOfTurn: "<|im_end|>" },
  { family: "qwen3_moe", tokenizer: "qwen3", reply: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', endOfTurn: "<|im_end|>" },
  { family: "gemma3", tokenizer: "gemma3", reply: '[get_weather(city="Paris")]', endOfTurn: "<end_of_turn>" },
  { family: "phi3", tokenizer: "phi3", reply: '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>', endOfTurn: "<|end|>" },
];

/** Each done frame's token frames' `reply` deltas. */
const deltasOf = new WeakMap<DoneFrame, (ReplyDelta | undefined)[]>();

/** A turn's done frame, once its token frames' `reply` deltas are checked to add up to its message (the ReplyDelta contract). */
function turn(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  const deltas: (ReplyDelta | undefined)[] = [];
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "token") deltas.push(f.reply);
      else if (f.type === "done") {
        const mismatch = deltas.includes(undefined) ? "a token frame without reply" : replyDeltasMismatch(deltas, f.message);
        deltasOf.set(f, deltas);
        if (mismatch) reject(new Error(`${mismatch} (${JSON.stringify(f.text)})`));
        else resolve(f);
      }
      else if (f.type === "error") reject(new Error(f.message));
    });
  });
}

describe("family chat turns", () => {
  for (const c of CASES) {
    it(`${c.family}: a tool call in its own syntax round-trips through its chat template, the next turn reuses the cache, and speculation gives the same greedy reply`, async () => {
      const tokDir = join(root, `tok-${c.tokenizer}`);
      const info = await writeFamilyTokenizer(c.tokenizer, tokDir);
      const dir = await materializeModel({ dir: join(root, c.family), config: tinyFamilyConfig(c.family, info), seed: 9, tokenizerFrom: tokDir });
      const model = await loadModel({ dir });
      const inner = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 64, blockSize: BLOCK, threads: 1 });
      executors.push(inner);
      const executor = new ScriptedExecutor(inner);
      const pool = new BlockPool({ numBlocks: 64, blockSize: BLOCK });
      const engine = createEngine({
        executor, pool, codec: model.codec, modelId: model.spec.modelId, enablePrefixCache: true, backendId: "test",
        scheduler: { maxBatchTokens: 256, maxRunningSequences: 4, blockSize: BLOCK },
        speculative: { source: new SequenceLookup(), maxDraftTokens: 4 },
      });
      // The scripted turns below do not speculate (the script stands in for argmax-only steps).
      const base: GenerateRequest = {
        requestId: "r", trajectoryId: "t", mode: "full", tools, sampling: greedy(64), speculative: false,
        messages: [{ role: "system", content: "You are a weather agent. ".repeat(8) }, { role: "user", content: "Weather in Paris?" }],
      };
      executor.script = [...model.codec.encode(c.reply), ...model.codec.encode(c.endOfTurn)];
      const t1 = await turn(engine, base);
      expect([t1.finishReason, t1.text]).toEqual(["stop", c.reply]);
      expect(t1.message.tool_calls).toEqual([{ id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }]);
      // The call streamed: its name came in an earlier token frame than its last arguments piece.
      const [streamed] = sumReplyDeltas(deltasOf.get(t1)!).calls;
      expect(streamed!.opened).toBeLessThan(streamed!.last);

      const s1 = engine.states.get(t1.stateId)!;
      const result = { role: "tool" as const, content: '{"temperature": 21}', tool_call_id: t1.message.tool_calls![0]!.id };
      const t2 = await turn(engine, { ...base, mode: "delta", stateId: t1.stateId, messages: [result], sampling: greedy(4) });
      const s2 = engine.states.get(t2.stateId)!;
      // The template renders the parsed call back to the generated text: the next prompt carries the generated ids.
      expect(s2.promptTokenIds.slice(0, s1.promptTokenIds.length + s1.generatedTokenIds.length)).toEqual([...s1.promptTokenIds, ...s1.generatedTokenIds]);
      expect(s2.promptText).toContain('{"temperature": 21}');
      expect(t2.usage.cachedTokens).toBe(s1.promptTokenIds.length + s1.generatedTokenIds.length - 1); // the kept partial block too (the exact tail)

      // Speculative decoding (prompt lookup) gives the model's own greedy reply, cache cold and warm.
      const free: GenerateRequest = { ...base, trajectoryId: undefined, tools: undefined, messages: [{ role: "user", content: "Repeat: alpha beta gamma delta. ".repeat(4) }], sampling: { ...greedy(32), ignoreEos: true } };
      const plain = await turn(engine, { ...free, cacheSalt: "plain", trajectoryId: "plain" });
      const ids = (d: DoneFrame) => engine.states.get(d.stateId)!.generatedTokenIds;
      for (const warmth of ["cold", "warm"]) {
        const fast = await turn(engine, { ...free, cacheSalt: "spec", speculative: true, trajectoryId: warmth });
        expect([fast.text, ids(fast)], `${c.family} ${warmth}`).toEqual([plain.text, ids(plain)]);
        expect(fast.speculation!.drafted, JSON.stringify([fast.text, fast.usage, ids(fast)])).toBeGreaterThan(0);
        expect(fast.usage.cachedTokens > 0).toBe(warmth === "warm");
      }
      engine.kv.checkInvariants();

      // A conversation the template refuses (Gemma's role alternation) is the client's error.
      if (c.family === "gemma3") {
        const bad = await new Promise<Frame>((resolve) => engine.submit({ ...base, messages: [{ role: "user", content: "a" }, { role: "user", content: "b" }] }, (f) => f.type !== "token" && resolve(f)));
        expect(bad).toMatchObject({ type: "error", code: "invalid_request", retryable: false });
        expect((bad as { message: string }).message).toMatch(/^the model's chat template rejects these messages: Conversation roles must alternate/);
      }
    });
  }
});
