import { describe, expect, it } from "vitest";
import { hashBlocks, hashRoot, shortBlockHash } from "../../protocol/block-hash";
import type { DoneFrame, ErrorFrame, GenerateRequest, ToolDefinition } from "../../protocol/messages";
import type { StepRecord } from "./step-trace";
import { BLOCK, engineFixture, greedy, prompt, turn } from "./engine-test-fixture";

const fx = engineFixture();
const makeEngine = fx.makeEngine;


describe("Engine: reuse never changes an answer", () => {
  it("gives identical greedy generations with the prefix cache on and off", async () => {
    const on = await makeEngine({ prefixCache: true });
    const off = await makeEngine({ prefixCache: false });
    const shared = prompt(70);
    const prompts = [shared, [...shared, 7, 8, 9], [...shared.slice(0, 40), 11, 12], [...shared, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]];
    const cached: number[] = [];
    for (const p of prompts) {
      const a = await on.engine.generateTokens({ tokenIds: p, sampling: greedy(20) });
      const b = await off.engine.generateTokens({ tokenIds: p, sampling: greedy(20) });
      expect(a.tokenIds).toEqual(b.tokenIds);
      expect(b.usage.cachedTokens).toBe(0);
      cached.push(a.usage.cachedTokens);
    }
    expect(cached).toEqual([0, 64, 32, 64]);
  });

  it("shares a common prefix's blocks between two running sequences (reference count 2), and both stay correct", async () => {
    const { engine, executor } = await makeEngine();
    const solo = await makeEngine();
    const shared = prompt(50, 3);
    const a = engine.generateTokens({ tokenIds: [...shared, 1, 2], sampling: greedy(30) });
    // Submit b once a has computed its prompt, so b's prefix is cached and a is still decoding.
    while (!executor.steps.some((s) => s.sequences.some((q) => q.startPos >= 52))) await new Promise((r) => setTimeout(r, 1));
    const b = engine.generateTokens({ tokenIds: [...shared, 3, 4, 5], sampling: greedy(10) });
    const [ra, rb] = await Promise.all([a, b]);
    expect(rb.usage.cachedTokens).toBe(48);
    const sharedStep = executor.steps.find((s) => s.sequences.length === 2);
    expect(sharedStep).toBeDefined();
    const [ta, tb] = sharedStep!.sequences.map((s) => s.blockTable as number[]);
    expect(ta!.slice(0, 3)).toEqual(tb!.slice(0, 3));
    expect(sharedStep!.refCounts[0]!.slice(0, 3)).toEqual([2, 2, 2]);
    expect(ra.tokenIds).toEqual((await solo.engine.generateTokens({ tokenIds: [...shared, 1, 2], sampling: greedy(30) })).tokenIds);
    expect(rb.tokenIds).toEqual((await solo.engine.generateTokens({ tokenIds: [...shared, 3, 4, 5], sampling: greedy(10) })).tokenIds);
  });

  it("keeps outputs correct when a tiny pool evicts cached blocks", async () => {
    const tiny = await makeEngine({ numBlocks: 10 });
    const big = await makeEngine();
    const prompts = [0, 1, 2, 3, 0, 2].map((k) => prompt(60, k * 1000));
    for (const p of prompts) {
      const a = await tiny.engine.generateTokens({ tokenIds: p, sampling: greedy(12) });
      const b = await big.engine.generateTokens({ tokenIds: p, sampling: greedy(12) });
      expect(a.tokenIds).toEqual(b.tokenIds);
    }
    expect(tiny.pool.stats.evictions).toBeGreaterThan(0);
    tiny.pool.checkInvariants();
  });

  it("keeps outputs correct under preemption", async () => {
    // 4 sequences of 40 + 40 tokens need 5 blocks each at the end; the pool has 12.
    const small = await makeEngine({ numBlocks: 12 });
    const big = await makeEngine();
    const prompts = [0, 1, 2, 3].map((k) => prompt(40, k * 777));
    const got = await Promise.all(prompts.map((p) => small.engine.generateTokens({ tokenIds: p, sampling: greedy(40) })));
    expect(small.engine.counters.preemptions).toBeGreaterThan(0);
    for (let i = 0; i < prompts.length; i++) {
      const want = await big.engine.generateTokens({ tokenIds: prompts[i]!, sampling: greedy(40) });
      expect(got[i]!.tokenIds).toEqual(want.tokenIds);
    }
    small.pool.checkInvariants();
  });

  it("batches decode steps of concurrent sequences with prefill chunks under the token budget", async () => {
    const { engine, executor } = await makeEngine({ maxBatchTokens: 32 });
    await Promise.all([0, 1, 2].map((k) => engine.generateTokens({ tokenIds: prompt(70, k * 99), sampling: greedy(8) })));
    for (const s of executor.steps) expect(s.sequences.reduce((a, q) => a + q.tokenIds.length, 0)).toBeLessThanOrEqual(32);
    expect(executor.steps.some((s) => s.sequences.some((q) => q.tokenIds.length === 1) && s.sequences.some((q) => q.tokenIds.length > 1))).toBe(true);
  });

  it("reports every step it runs to onStep, with the rows, sampled rows and attention work of its sequences", async () => {
    const records: StepRecord[] = [];
    const { engine, executor } = await makeEngine({ maxBatchTokens: 32, onStep: (r) => records.push(r) });
    await Promise.all([0, 1].map((k) => engine.generateTokens({ tokenIds: prompt(40, k * 77), sampling: greedy(5) })));
    expect(records).toHaveLength(executor.steps.length);
    expect(records.length).toBe(engine.counters.steps);
    const rows = records.reduce((a, r) => a + r.decodeRows + r.prefillRows, 0);
    expect(rows).toBe(engine.counters.stepTokens);
    // Each sequence samples its first token at the end of its prefill, then 4 more while decoding.
    expect(records.reduce((a, r) => a + r.logitRows, 0)).toBe(2 * 5);
    expect(records.reduce((a, r) => a + r.decodeRows, 0)).toBe(2 * 4);
    records.forEach((r, i) => {
      const seqs = executor.steps[i]!.sequences;
      expect(r.prefillSequences).toBe(seqs.filter((q) => q.tokenIds.length > 1).length);
      expect(r.decodeContext).toBe(seqs.filter((q) => q.tokenIds.length === 1).reduce((a, q) => a + q.startPos, 0));
      expect(r.wallMs).toBeGreaterThan(0);
      expect(r.cpuMs).toBeGreaterThanOrEqual(0);
    });
  });
});

describe("Engine: turns and states", () => {
  const base = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
    requestId: "r",
    trajectoryId: "traj",
    mode: "full",
    messages: [
      { role: "system", content: "You are an agent. ".repeat(12) },
      { role: "user", content: "Start." },
    ],
    sampling: greedy(9),
    ...over,
  });

  it("extends a delta turn from the exact prompt and generated ids, and reuses them from the cache", async () => {
    const { engine } = await makeEngine();
    const t1 = (await turn(engine, base())).last as DoneFrame;
    expect(t1.message).toEqual({ role: "assistant", content: t1.text });
    const s1 = engine.states.get(t1.stateId)!;
    expect(s1.generatedTokenIds).toHaveLength(9);
    const t2 = (await turn(engine, base({ mode: "delta", stateId: t1.stateId, messages: [{ role: "tool", content: "ok", tool_call_id: "c1" }] }))).last as DoneFrame;
    expect(t2.type).toBe("done");
    const s2 = engine.states.get(t2.stateId)!;
    expect(s2.promptTokenIds.slice(0, s1.promptTokenIds.length + 9)).toEqual([...s1.promptTokenIds, ...s1.generatedTokenIds]);
    // Every token the first turn computed is reused, its partial last block included (the exact
    // tail): all but the last generated token, which no step fed to the fx.model().
    const before = s1.promptTokenIds.length + 9;
    expect(before % BLOCK).not.toBe(1); // a partial block of at least one computed token
    expect(t2.usage.cachedTokens).toBe(before - 1);
    expect(t2.usage.computedTokens).toBe(s2.promptTokenIds.length - (before - 1));
    // The same transcript as a full turn takes the same path (no re-tokenization of the reply).
    const t3 = (await turn(engine, base({ trajectoryId: "traj", messages: [...s2.messages, { role: "user", content: "next" }] }))).last as DoneFrame;
    const s3 = engine.states.get(t3.stateId)!;
    expect(s3.promptTokenIds.slice(0, s2.promptTokenIds.length + 9)).toEqual([...s2.promptTokenIds, ...s2.generatedTokenIds]);
  });

  it("puts the short hashes of the prompt's full blocks in the done frame, and publishes them as KV events", async () => {
    const { engine } = await makeEngine({ numBlocks: 24 });
    expect(engine.kvEventBatch()).toEqual({ seq: 1, kind: "snapshot", stored: [], removed: [] });
    const t1 = (await turn(engine, base({ cacheSalt: "tenant-x" }))).last as DoneFrame;
    const s1 = engine.states.get(t1.stateId)!;
    const root = hashRoot({ modelId: fx.model().spec.modelId, salt: "tenant-x" });
    const expected = hashBlocks(root, s1.promptTokenIds, BLOCK).map(shortBlockHash);
    expect(expected.length).toBe(Math.floor(s1.promptTokenIds.length / BLOCK));
    expect(expected.length).toBeGreaterThan(2);
    expect(t1.promptBlockHashes).toEqual(expected);
    // The same blocks (and the full blocks of prompt + reply) were stored in the pool: a delta.
    const batch = engine.kvEventBatch();
    expect(batch).toMatchObject({ seq: 2, kind: "delta", removed: [] });
    expect(batch.stored.slice(0, expected.length)).toEqual(expected);
    // Other prompts fill the 24-block pool: the first turn's blocks are evicted, reported removed.
    for (const k of [1, 2, 3]) await engine.generateTokens({ tokenIds: prompt(150, k * 1000), sampling: greedy(2) });
    const evicted = engine.kvEventBatch();
    expect(evicted.kind).toBe("delta");
    expect(evicted.removed).toEqual(expect.arrayContaining(expected));
    const cachedNow = new Set([...engine.kv.cachedBlockHashes()].map(shortBlockHash));
    for (const h of expected) expect(cachedNow.has(h)).toBe(false);
  });

  it("sends no prompt block hashes with the prefix cache off", async () => {
    const { engine } = await makeEngine({ prefixCache: false });
    const done = (await turn(engine, base())).last as DoneFrame;
    expect(done.promptBlockHashes).toEqual([]);
    engine.kvEventBatch();
    expect(engine.kvEventBatch()).toMatchObject({ kind: "delta", stored: [], removed: [] });
  });

  const tools: ToolDefinition[] = [
    { type: "function", function: { name: "x", description: "Does x", parameters: { type: "object", properties: { a: { type: "integer" } } } } },
  ];
  const imEnd = () => fx.model().codec.encode("<|im_end|>");

  it("answers a tool call as a parsed message, and keeps its generated ids in the next turn's prompt", async () => {
    const { engine, executor } = await makeEngine();
    const reply = '<tool_call>\n{"name": "x", "arguments": {"a": 1}}\n</tool_call>';
    // One token per character: not how the tokenizer would encode the text, so a re-encoded reply
    // would show in the next prompt's ids.
    executor.script = [...[...reply].flatMap((c) => fx.model().codec.encode(c)), ...imEnd()];
    const t1 = (await turn(engine, base({ tools, sampling: greedy(96, { ignoreEos: false }) }))).last as DoneFrame;
    expect([t1.finishReason, t1.text]).toEqual(["stop", reply]);
    expect(t1.message).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [{ id: expect.stringMatching(/^call_[0-9a-f]{24}$/), type: "function", function: { name: "x", arguments: '{"a": 1}' } }],
    });
    const s1 = engine.states.get(t1.stateId)!;
    expect(s1.messages.at(-1)).toEqual(t1.message);
    expect(s1.generatedText).toBe(`${reply}<|im_end|>`);
    expect(s1.generatedTokenIds).not.toEqual(fx.model().codec.encode(s1.generatedText));

    const result = { role: "tool" as const, content: '{"ok": true}', tool_call_id: t1.message.tool_calls![0]!.id };
    executor.script = [];
    const t2 = (await turn(engine, base({ mode: "delta", stateId: t1.stateId, messages: [result], sampling: greedy(4) }))).last as DoneFrame;
    const s2 = engine.states.get(t2.stateId)!;
    // The template re-renders the parsed call byte for byte, so the reply's ids are the generated ones.
    expect(s2.promptText.slice(s1.promptText.length)).toBe(`${reply}<|im_end|>\n<|im_start|>user\n<tool_response>\n{"ok": true}\n</tool_response><|im_end|>\n<|im_start|>assistant\n`);
    const tail = fx.model().codec.encode(s2.promptText.slice(s1.promptText.length + s1.generatedText.length));
    expect(s2.promptTokenIds).toEqual([...s1.promptTokenIds, ...s1.generatedTokenIds, ...tail]);
    expect(t2.usage.cachedTokens).toBe(s1.promptTokenIds.length + s1.generatedTokenIds.length - 1);
    // On another trajectory, the same transcript sent in full (the client echoing the parsed
    // message back) takes the same path.
    executor.script = [...[...reply].flatMap((c) => fx.model().codec.encode(c)), ...imEnd()];
    const u1 = (await turn(engine, base({ trajectoryId: "other", tools, sampling: greedy(96, { ignoreEos: false }) }))).last as DoneFrame;
    executor.script = [];
    const echoed = { ...result, tool_call_id: u1.message.tool_calls![0]!.id };
    const u2 = (await turn(engine, base({ trajectoryId: "other", tools, messages: [...base().messages, u1.message, echoed], sampling: greedy(4) }))).last as DoneFrame;
    expect(engine.states.get(u2.stateId)!.promptTokenIds).toEqual(s2.promptTokenIds);
  });

  it("re-encodes a reply the template lays out differently, keeping the earlier prompt ids", async () => {
    const { engine, executor } = await makeEngine();
    const reply = '<tool_call>\n{"name": "x", "arguments": {"a": 1}}\n</tool_call>\nDone.';
    executor.script = [...fx.model().codec.encode(reply), ...imEnd()];
    const t1 = (await turn(engine, base({ tools, sampling: greedy(64, { ignoreEos: false }) }))).last as DoneFrame;
    expect(t1.message.content).toBe("Done.");
    expect(t1.message.tool_calls).toHaveLength(1);
    const s1 = engine.states.get(t1.stateId)!;
    const t2 = (await turn(engine, base({ mode: "delta", stateId: t1.stateId, messages: [{ role: "tool", content: "1", tool_call_id: "c" }], sampling: greedy(4) }))).last as DoneFrame;
    const s2 = engine.states.get(t2.stateId)!;
    const rest = s2.promptText.slice(s1.promptText.length);
    expect(rest.startsWith('Done.\n<tool_call>\n{"name": "x", "arguments": {"a": 1}}\n</tool_call><|im_end|>')).toBe(true);
    expect(s2.promptTokenIds).toEqual([...s1.promptTokenIds, ...fx.model().codec.encode(rest)]);
  });

  it("answers state_unknown for an unknown or superseded state, without touching the trajectory", async () => {
    const { engine } = await makeEngine();
    const t1 = (await turn(engine, base({ trajectoryId: "x" }))).last as DoneFrame;
    const t2 = (await turn(engine, base({ trajectoryId: "x", mode: "delta", stateId: t1.stateId, messages: [{ role: "user", content: "a" }] }))).last as DoneFrame;
    const stale = (await turn(engine, base({ trajectoryId: "x", mode: "delta", stateId: t1.stateId, messages: [{ role: "user", content: "b" }] }))).last as ErrorFrame;
    expect(stale.code).toBe("state_unknown");
    const ok = (await turn(engine, base({ trajectoryId: "x", mode: "delta", stateId: t2.stateId, messages: [{ role: "user", content: "c" }] }))).last;
    expect(ok.type).toBe("done");
  });

  it("stops on stop strings (not returned), stop token ids and max tokens; rejects over-long requests", async () => {
    const { engine } = await makeEngine();
    const free = (await turn(engine, base({ trajectoryId: undefined, sampling: greedy(12) }))).last as DoneFrame;
    expect(free.finishReason).toBe("length");
    const text = free.text;
    const stopAt = text.slice(3, 6);
    expect(stopAt.length).toBe(3);
    // The done frame names the stop string that ended the reply, among others that did not occur
    // (or occur later).
    const later = text.slice(text.indexOf(stopAt) + 1, text.indexOf(stopAt) + 5);
    const stopped = (await turn(engine, base({ trajectoryId: undefined, sampling: greedy(12, { stop: ["\u0000never", later, stopAt] }) }))).last as DoneFrame;
    expect(stopped.finishReason).toBe("stop_sequence");
    expect(stopped.stopSequence).toBe(stopAt);
    expect(stopped.text).toBe(text.slice(0, text.indexOf(stopAt)));
    expect(free.stopSequence).toBeUndefined();

    const ids = engine.states.get(free.stateId)!.generatedTokenIds;
    const byId = (await turn(engine, base({ trajectoryId: undefined, sampling: greedy(12, { stopTokenIds: [ids[4]!] }) }))).last as DoneFrame;
    expect(byId.finishReason).toBe("stop");
    expect(byId.usage.completionTokens).toBe(ids.indexOf(ids[4]!) + 1);

    const tooLong = (await turn(engine, base({ messages: [{ role: "user", content: "word ".repeat(fx.model().spec.maxPositions) }], sampling: greedy(1) }))).last as ErrorFrame;
    expect(tooLong.code).toBe("context_length_exceeded");
  });

  it("counts a conversation's prompt tokens as a full turn over it reports them", async () => {
    const { engine } = await makeEngine();
    const tools: ToolDefinition[] = [{ type: "function", function: { name: "read_file", description: "Reads a file", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } } }];
    const messages: GenerateRequest["messages"] = [
      { role: "system", content: "You are a coding agent." },
      { role: "user", content: "Open the README." },
      { role: "assistant", content: null, tool_calls: [{ id: "call_0", type: "function", function: { name: "read_file", arguments: '{"path":"README.md"}' } }] },
      { role: "tool", tool_call_id: "call_0", content: "# Agent Edge" },
    ];
    for (const t of [undefined, tools]) {
      const done = (await turn(engine, base({ trajectoryId: undefined, messages, ...(t ? { tools: t } : {}), sampling: greedy(1) }))).last as DoneFrame;
      expect(engine.countPromptTokens({ messages, ...(t ? { tools: t } : {}) })).toBe(done.usage.promptTokens);
    }
    expect(() => engine.countPromptTokens({ model: "other", messages })).toThrow(/not served here/);
  });

  it("samples reproducibly from a seed", async () => {
    const { engine } = await makeEngine();
    const sample = (seed: number) => engine.generateTokens({ tokenIds: prompt(30), sampling: greedy(16, { temperature: 1, topP: 0.9, topK: 50, seed }) });
    const a = await sample(1);
    const b = await sample(1);
    const c = await sample(2);
    expect(a.tokenIds).toEqual(b.tokenIds);
    expect(c.tokenIds).not.toEqual(a.tokenIds);
  });
});
