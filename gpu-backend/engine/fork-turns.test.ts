import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage, DoneFrame, Frame, GenerateRequest, SamplingParams } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { tinyFamilyConfig, type DemoFamily } from "../model/checkpoint/demo-families";
import { materializeModel } from "../model/checkpoint/demo-model";
import { writeFamilyTokenizer, type TokenizerFamily } from "../model/checkpoint/family-tokenizers";
import { ScriptedExecutor } from "./testing/scripted-executor";
import { loadModel, type LoadedModel } from "./load-model";
import type { Engine } from "./engine";
import { createEngine } from "./create-engine";
import { tinyModelDir } from "../model/testing/tiny-model";

/** A fork's first turn (`forkOf`) on the real engine and tiny model: the parent's exact ids. */

const BLOCK = 16;
let dir: string;
let model: LoadedModel;
const executors: CpuExecutor[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-fork-"));
  model = await loadModel({ dir: await tinyModelDir(dir) });
});

afterAll(async () => {
  for (const e of executors) await e.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function makeEngine(loaded: LoadedModel = model) {
  const inner = await CpuExecutor.create({ spec: loaded.spec, weights: loaded.weights, numBlocks: 256, blockSize: BLOCK, threads: 1 });
  executors.push(inner);
  const executor = new ScriptedExecutor(inner);
  const pool = new BlockPool({ numBlocks: 256, blockSize: BLOCK });
  executor.pool = pool;
  const engine = createEngine({
    executor,
    pool,
    codec: loaded.codec,
    modelId: loaded.spec.modelId,
    scheduler: { maxBatchTokens: 64, maxRunningSequences: 16, blockSize: BLOCK },
    enablePrefixCache: true,
    backendId: "test",
  });
  return { engine, executor };
}

const greedy = (maxTokens: number, over: Partial<SamplingParams> = {}): SamplingParams => ({ maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true, ...over });

function turn(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) => {
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    });
  });
}

describe("Engine: a fork's first turn starts from its parent's token ids", () => {
  const opening: ChatMessage[] = [
    { role: "system", content: "You are an agent. ".repeat(12) },
    { role: "user", content: "Start." },
  ];
  const reply = "Hello there, friend. Shall we begin?";
  const other: ChatMessage = { role: "user", content: "Something else." };
  const request = (over: Partial<GenerateRequest>): GenerateRequest => ({ requestId: "r", cacheSalt: "tenant-a", mode: "full", messages: opening, sampling: greedy(6), ...over });

  /** Turn 1 replies `reply` one token per character: not how the tokenizer encodes it. */
  async function firstTurn(engine: Engine, executor: ScriptedExecutor, trajectoryId: string): Promise<DoneFrame> {
    executor.script = [...[...reply].flatMap((c) => model.codec.encode(c)), ...model.codec.encode("<|im_end|>")];
    const done = await turn(engine, request({ trajectoryId, sampling: greedy(64, { ignoreEos: false }) }));
    executor.script = [];
    return done;
  }

  it("takes the parent's ids through the forked reply and counts what the parent's own continuation would", async () => {
    const { engine, executor } = await makeEngine();
    const t1 = await firstTurn(engine, executor, "tenant-a/parent");
    expect(t1.message).toEqual({ role: "assistant", content: reply });
    const s1 = engine.states.get(t1.stateId)!;
    const throughReply = [...s1.promptTokenIds, ...s1.generatedTokenIds];
    expect(s1.generatedTokenIds).not.toEqual(model.codec.encode(s1.generatedText));
    const t2 = await turn(engine, request({ trajectoryId: "tenant-a/parent", mode: "delta", stateId: t1.stateId, messages: [{ role: "user", content: "Two." }] }));
    await turn(engine, request({ trajectoryId: "tenant-a/parent", mode: "delta", stateId: t2.stateId, messages: [{ role: "user", content: "Three." }] }));

    // The fork of turn 1 with a new user message, as the edge sends it: full, naming its parent.
    const forked = [...opening, t1.message, other];
    const fork = await turn(engine, request({ trajectoryId: "tenant-a/fork", forkOf: "tenant-a/parent", messages: forked }));
    const forkIds = engine.states.get(fork.stateId)!.promptTokenIds;
    expect(forkIds.slice(0, throughReply.length)).toEqual(throughReply);
    expect(fork.usage.cachedTokens).toBeGreaterThanOrEqual(Math.floor(throughReply.length / BLOCK) * BLOCK);

    // The same transcript without `forkOf` re-tokenizes the reply: another count, fewer cached.
    const plain = await turn(engine, request({ trajectoryId: "tenant-a/plain", messages: forked }));
    console.log(
      `fork of turn 1 (${throughReply.length} ids through its reply): prompt ${fork.usage.promptTokens}, cached ${fork.usage.cachedTokens}; ` +
        `without forkOf: prompt ${plain.usage.promptTokens}, cached ${plain.usage.cachedTokens}`,
    );
    expect(plain.usage.promptTokens).not.toBe(fork.usage.promptTokens);
    expect(plain.usage.cachedTokens).toBeLessThan(fork.usage.cachedTokens);

    // The parent's own continuation from turn 1 with the same message (a delta turn on another engine).
    const ref = await makeEngine();
    const r1 = await firstTurn(ref.engine, ref.executor, "tenant-a/ref");
    const r2 = await turn(ref.engine, request({ trajectoryId: "tenant-a/ref", mode: "delta", stateId: r1.stateId, messages: [other] }));
    expect(ref.engine.states.get(r2.stateId)!.promptTokenIds).toEqual(forkIds);
    expect(r2.usage.promptTokens).toBe(fork.usage.promptTokens);
  });

  it("takes a tool-call reply's generated ids though the edge stores it canonical (ids call_k, canonical JSON)", async () => {
    const tools = [{ type: "function" as const, function: { name: "x", description: "Does x", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } } } } }];
    const call = '<tool_call>\n{"name": "x", "arguments": {"b": 2, "a": 1}}\n</tool_call>';
    const script = [...[...call].flatMap((c) => model.codec.encode(c)), ...model.codec.encode("<|im_end|>")];
    const canonical: ChatMessage = { role: "assistant", content: null, tool_calls: [{ id: "call_0", type: "function", function: { name: "x", arguments: '{"a":1,"b":2}' } }] };
    const result = (content: string): ChatMessage => ({ role: "tool", content, tool_call_id: "call_0" });
    const runParent = async (engine: Engine, executor: ScriptedExecutor, trajectoryId: string, next: ChatMessage) => {
      executor.script = [...script];
      const t1 = await turn(engine, request({ trajectoryId, tools, sampling: greedy(96, { ignoreEos: false }) }));
      executor.script = [];
      expect(t1.message.tool_calls![0]!.function.arguments).toBe('{"b": 2, "a": 1}');
      const s1 = engine.states.get(t1.stateId)!;
      return { s1, t2: await turn(engine, request({ trajectoryId, mode: "delta", stateId: t1.stateId, messages: [next] })) };
    };

    const { engine, executor } = await makeEngine();
    const { s1, t2 } = await runParent(engine, executor, "tenant-a/parent", result("first result"));
    const throughReply = [...s1.promptTokenIds, ...s1.generatedTokenIds];
    await turn(engine, request({ trajectoryId: "tenant-a/parent", mode: "delta", stateId: t2.stateId, messages: [{ role: "user", content: "Go on." }] }));

    const forked = [...opening, canonical, result("another result")];
    const fork = await turn(engine, request({ trajectoryId: "tenant-a/fork", forkOf: "tenant-a/parent", tools, messages: forked }));
    const forkIds = engine.states.get(fork.stateId)!.promptTokenIds;
    expect(forkIds.slice(0, throughReply.length)).toEqual(throughReply);
    const plain = await turn(engine, request({ trajectoryId: "tenant-a/plain", tools, messages: forked }));
    console.log(`fork of a tool call (${throughReply.length} ids through it): prompt ${fork.usage.promptTokens}, cached ${fork.usage.cachedTokens}; without forkOf: prompt ${plain.usage.promptTokens}, cached ${plain.usage.cachedTokens}`);
    expect(plain.usage.cachedTokens).toBeLessThan(fork.usage.cachedTokens);

    const ref = await makeEngine();
    const { t2: r2 } = await runParent(ref.engine, ref.executor, "tenant-a/ref", result("another result"));
    expect(ref.engine.states.get(r2.stateId)!.promptTokenIds).toEqual(forkIds);
  });

  it("is a plain full turn when the parent's state is gone or under another cache salt", async () => {
    const { engine, executor } = await makeEngine();
    const t1 = await firstTurn(engine, executor, "tenant-a/parent");
    const forked = [...opening, t1.message, other];
    const plain = await turn(engine, request({ trajectoryId: "tenant-a/plain", messages: forked }));
    const plainIds = engine.states.get(plain.stateId)!.promptTokenIds;
    const unknown = await turn(engine, request({ trajectoryId: "tenant-a/f1", forkOf: "tenant-a/nobody", messages: forked }));
    expect(engine.states.get(unknown.stateId)!.promptTokenIds).toEqual(plainIds);
    const salted = await turn(engine, request({ trajectoryId: "tenant-b/f2", cacheSalt: "tenant-b", forkOf: "tenant-a/parent", messages: forked }));
    expect(engine.states.get(salted.stateId)!.promptTokenIds).toEqual(plainIds);
    expect(salted.usage.cachedTokens).toBe(0);
  });

  // `perChar`: the reply scripted one token per character (Phi-3's tokenizer adds a space before
  // a character encoded alone, so it gets the reply's own encoding).
  const FAMILIES: { family: DemoFamily; tokenizer: TokenizerFamily; reply: string; endOfTurn: string; perChar: boolean }[] = [
    { family: "gemma3", tokenizer: "gemma3", reply: '[get_weather(city="Paris")]', endOfTurn: "<end_of_turn>", perChar: true },
    { family: "phi3", tokenizer: "phi3", reply: '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>', endOfTurn: "<|end|>", perChar: false },
  ];
  for (const c of FAMILIES) {
    it(`${c.family}: the fork's ids equal the parent's own continuation with its tokenizer and template`, async () => {
      const tokDir = join(dir, `tok-${c.tokenizer}`);
      const info = await writeFamilyTokenizer(c.tokenizer, tokDir);
      const loaded = await loadModel({ dir: await materializeModel({ dir: join(dir, c.family), config: tinyFamilyConfig(c.family, info), seed: 9, tokenizerFrom: tokDir }) });
      const tools = [{ type: "function" as const, function: { name: "get_weather", description: "Weather of a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
      const start: ChatMessage[] = [{ role: "system", content: "You are a weather agent. ".repeat(8) }, { role: "user", content: "Weather in Paris?" }];
      const ask = (over: Partial<GenerateRequest>): GenerateRequest => ({ requestId: "r", cacheSalt: "s", mode: "full", tools, messages: start, sampling: greedy(4, { ignoreEos: false }), ...over });
      const runParent = async (engine: Engine, executor: ScriptedExecutor, trajectoryId: string, answer: string) => {
        executor.script = [...(c.perChar ? [...c.reply].flatMap((ch) => loaded.codec.encode(ch)) : loaded.codec.encode(c.reply)), ...loaded.codec.encode(c.endOfTurn)];
        const t1 = await turn(engine, ask({ trajectoryId, sampling: greedy(96, { ignoreEos: false }) }));
        executor.script = [];
        const s1 = engine.states.get(t1.stateId)!;
        const t2 = await turn(engine, ask({ trajectoryId, mode: "delta", stateId: t1.stateId, messages: [{ role: "tool", content: answer, tool_call_id: "call_0" }] }));
        return { s1, t1, t2 };
      };
      const { engine, executor } = await makeEngine(loaded);
      const { s1, t1, t2 } = await runParent(engine, executor, "s/parent", '{"temperature": 21}');
      expect(t1.message.tool_calls).toHaveLength(1);
      await turn(engine, ask({ trajectoryId: "s/parent", mode: "delta", stateId: t2.stateId, messages: [{ role: "user", content: "And Rome?" }] }));
      const canonical: ChatMessage = { role: "assistant", content: null, tool_calls: [{ id: "call_0", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] };
      const fork = await turn(engine, ask({ trajectoryId: "s/fork", forkOf: "s/parent", messages: [...start, canonical, { role: "tool", content: '{"temperature": 5}', tool_call_id: "call_0" }] }));
      const forkIds = engine.states.get(fork.stateId)!.promptTokenIds;
      const throughReply = [...s1.promptTokenIds, ...s1.generatedTokenIds];
      expect(forkIds.slice(0, throughReply.length)).toEqual(throughReply);
      const ref = await makeEngine(loaded);
      const { t2: r2 } = await runParent(ref.engine, ref.executor, "s/ref", '{"temperature": 5}');
      expect(ref.engine.states.get(r2.stateId)!.promptTokenIds).toEqual(forkIds);
    });
  }
});
