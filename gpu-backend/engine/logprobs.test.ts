import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SamplingParams, TokenLogprob } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { RecordingExecutor } from "./testing/scripted-executor";
import { TokenPieces } from "../tokenizer/token-pieces";
import { createEngine } from "./create-engine";
import { loadModel, type LoadedModel } from "./load-model";
import { MIN_LOGPROB, positionLogprobs, tokenLogprob, topIds } from "./logprobs";
import { tinyModelDir } from "../model/testing/tiny-model";

/** ln softmax(row)[i], written out in float64 the slow way. */
function directLogprob(row: ArrayLike<number>, i: number): number {
  let z = 0;
  for (let j = 0; j < row.length; j++) z += Math.exp(row[j]!);
  return row[i]! - Math.log(z);
}

describe("positionLogprobs: the log-softmax of the raw logits row", () => {
  const row = Float32Array.from([0.5, -1.25, 3, 2.75, -4, 3, 0]);

  it("equals a direct computation at the chosen token and at every top entry", () => {
    const r = positionLogprobs(row, 4, 5);
    expect(r.logprob).toBeCloseTo(directLogprob(row, 4), 12);
    for (const t of r.top) expect(t.logprob).toBeCloseTo(directLogprob(row, t.tokenId), 12);
    const all = positionLogprobs(row, 0, row.length);
    expect(all.top.reduce((s, t) => s + Math.exp(t.logprob), 0)).toBeCloseTo(1, 12);
  });

  it("orders the top entries by logprob, equal ones by lower id first", () => {
    expect(positionLogprobs(row, 0, 4).top.map((t) => t.tokenId)).toEqual([2, 5, 3, 0]);
    expect(topIds(Float32Array.from([1, 1, 1, 1]), 3)).toEqual([0, 1, 2]);
    expect(topIds(Float32Array.from([1, 3, 3, 2]), 3)).toEqual([1, 2, 3]);
    expect(topIds(Float32Array.from([5, 4, 3]), 10)).toEqual([0, 1, 2]);
    expect(topIds(row, 0)).toEqual([]);
  });

  it("agrees with a sort on a large random row (vocabulary-sized, with many ties)", () => {
    let s = 12345;
    const rand = () => ((s = (s * 1103515245 + 12345) >>> 0) / 2 ** 32);
    const big = Float32Array.from({ length: 151_936 }, () => Math.round(rand() * 2000) / 100 - 10);
    const expected = Array.from(big.keys()).sort((a, b) => big[b]! - big[a]! || a - b).slice(0, 20);
    expect(topIds(big, 20)).toEqual(expected);
    const r = positionLogprobs(big, expected[0]!, 20);
    expect(r.logprob).toBe(r.top[0]!.logprob);
    expect(r.logprob).toBeCloseTo(directLogprob(big, expected[0]!), 9);
  });

  it("does not depend on the logits' offset (shift invariance) and never overflows", () => {
    const shifted = row.map((x) => x + 1000);
    expect(positionLogprobs(shifted, 2, 0).logprob).toBeCloseTo(positionLogprobs(row, 2, 0).logprob, 4);
    expect(Number.isFinite(positionLogprobs(shifted, 2, 0).logprob)).toBe(true);
  });

  it("reports -Infinity and NaN as -9999, and never more than 0", () => {
    const r = positionLogprobs(Float32Array.from([0, -Infinity, NaN]), 1, 3);
    expect(r.logprob).toBe(MIN_LOGPROB);
    expect(r.top.map((t) => [t.tokenId, t.logprob])).toEqual([
      [0, 0],
      [1, MIN_LOGPROB],
    ]);
    expect(positionLogprobs(Float32Array.from([7]), 0, 1).logprob).toBe(0);
  });

  it("adds each id's text and bytes", () => {
    const pieces = ["a", "b", "c"].map((text) => ({ text, bytes: [text.charCodeAt(0)] }));
    const lp = tokenLogprob(Float32Array.from([1, 2, 0]), 0, 2, (id) => pieces[id]!);
    expect([lp.token, lp.bytes, lp.topLogprobs.map((t) => [t.token, t.bytes])]).toEqual([
      "a",
      [97],
      [
        ["b", [98]],
        ["a", [97]],
      ],
    ]);
    expect(lp.logprob).toBeCloseTo(directLogprob([1, 2, 0], 0), 12);
    expect(lp.topLogprobs[0]!.logprob).toBeCloseTo(directLogprob([1, 2, 0], 1), 12);
    expect(lp.topLogprobs[1]!.logprob).toBe(lp.logprob);
  });
});

// ---------------------------------------------------------------------------------------------
// Token pieces and the engine, on the tiny random model (Qwen3's tokenizer) and the CPU executor
// ---------------------------------------------------------------------------------------------

let dir: string;
let model: LoadedModel;
const executors: CpuExecutor[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-logprobs-"));
  model = await loadModel({ dir: await tinyModelDir(dir) });
});

afterAll(async () => {
  for (const e of executors) await e.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("TokenPieces: a token's text and raw bytes", () => {
  it("gives byte-level BPE pieces their raw bytes, a split character's included", () => {
    const tokenizer = model.checkpoint.tokenizer;
    const pieces = new TokenPieces(tokenizer);
    const text = "héllo 你好 😀 <|im_end|>";
    const ids = tokenizer.encode(text);
    const all = ids.map((id) => pieces.piece(id));
    expect(Buffer.from(all.flatMap((p) => p.bytes)).toString("utf8")).toBe(text);
    for (const [i, p] of all.entries()) expect(p.text).toBe(tokenizer.decode([ids[i]!]));
    expect(pieces.piece(tokenizer.encode(" ")[0]!)).toEqual({ text: " ", bytes: [32] });
    expect(pieces.piece(tokenizer.tokenId("<|im_end|>")!)).toEqual({ text: "<|im_end|>", bytes: [...Buffer.from("<|im_end|>")] });
  });

  it("finds the bytes of a character split over two tokens", () => {
    const tokenizer = model.checkpoint.tokenizer;
    const pieces = new TokenPieces(tokenizer);
    // A rare character: byte-level BPE spells it with more than one token.
    const ids = tokenizer.encode("\u{1D11E}");
    expect(ids.length).toBeGreaterThan(1);
    const parts = ids.map((id) => pieces.piece(id));
    expect(parts.some((p) => p.text === "\uFFFD" || p.text.includes("\uFFFD"))).toBe(true);
    expect(parts.flatMap((p) => p.bytes)).toEqual([...Buffer.from("\u{1D11E}")]);
  });

  it("gives an id outside the vocabulary (the padded rows) an empty piece", () => {
    const pieces = new TokenPieces(model.checkpoint.tokenizer);
    expect(pieces.piece(model.spec.vocabSize - 1)).toEqual({ text: "", bytes: [] });
  });

  it("reads SentencePiece byte fallback, and never misreads a piece that only looks byte-level", () => {
    const vocab: Record<number, [string, string]> = {
      1: ["<0xC3>", "\uFFFD"],
      2: ["<0x41>", "A"],
      3: ["é", "é"], // a SentencePiece piece: U+00E9 is also a byte-level character (byte 0xE9)
      4: ["▁world", " world"],
    };
    const fake = { decode: (ids: readonly number[]) => vocab[ids[0]!]![1], idToToken: (id: number) => vocab[id]?.[0] };
    const pieces = new TokenPieces(fake);
    expect(pieces.piece(1)).toEqual({ text: "\uFFFD", bytes: [0xc3] });
    expect(pieces.piece(2)).toEqual({ text: "A", bytes: [0x41] });
    expect(pieces.piece(3)).toEqual({ text: "é", bytes: [0xc3, 0xa9] });
    expect(pieces.piece(4)).toEqual({ text: " world", bytes: [...Buffer.from(" world")] });
  });
});

async function makeEngine() {
  const inner = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 64, blockSize: 16, threads: 1 });
  executors.push(inner);
  const executor = new RecordingExecutor(inner);
  const engine = createEngine({
    executor,
    pool: new BlockPool({ numBlocks: 64, blockSize: 16 }),
    codec: model.codec,
    modelId: model.spec.modelId,
    scheduler: { maxBatchTokens: 64, maxRunningSequences: 8, blockSize: 16 },
    enablePrefixCache: false,
    backendId: "test",
  });
  return { engine, executor };
}

const sampling = (over: Partial<SamplingParams> = {}): SamplingParams => ({ maxTokens: 12, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true, ...over });
const PROMPT = Array.from({ length: 20 }, (_, i) => 100 + i * 37);

describe("Engine: logprobs only when asked", () => {
  it("greedy without logprobs fetches no logits row; with logprobs the same tokens, and each logprob is the row's log-softmax", async () => {
    const { engine, executor } = await makeEngine();
    const plain = await engine.generateTokens({ tokenIds: PROMPT, sampling: sampling() });
    expect(plain.logprobs).toBeUndefined();
    expect(executor.steps.flatMap((st) => st.sequences.map((q) => q.logits))).toEqual(Array(12).fill("argmax"));
    expect(executor.rows.flat().every((r) => r.length === 0)).toBe(true);

    executor.steps.length = 0;
    executor.rows.length = 0;
    const asked = await engine.generateTokens({ tokenIds: PROMPT, sampling: sampling({ logprobs: 5 }) });
    expect(asked.tokenIds).toEqual(plain.tokenIds);
    expect(executor.steps.flatMap((st) => st.sequences.map((q) => q.logits))).toEqual(Array(12).fill("last"));
    const logprobs = asked.logprobs!;
    expect(logprobs).toHaveLength(12);
    for (const [i, lp] of logprobs.entries()) {
      const row = executor.rows[i]![0]!;
      const id = asked.tokenIds[i]!;
      expect(lp.logprob).toBeCloseTo(directLogprob(row, id), 6);
      expect(lp.topLogprobs).toHaveLength(5);
      // Greedy: the chosen token is the top-1, at least as likely as every alternative.
      expect(lp.topLogprobs[0]!.logprob).toBe(lp.logprob);
      expect(lp.topLogprobs[0]!.bytes).toEqual(lp.bytes);
      for (const t of lp.topLogprobs) expect(lp.logprob).toBeGreaterThanOrEqual(t.logprob);
      for (let k = 1; k < 5; k++) expect(lp.topLogprobs[k - 1]!.logprob).toBeGreaterThanOrEqual(lp.topLogprobs[k]!.logprob);
      expect(lp.topLogprobs.reduce((s, t) => s + Math.exp(t.logprob), 0)).toBeLessThanOrEqual(1);
      expect(lp.token).toBe(model.codec.decode([id]));
    }
  });

  it("reports the raw distribution: a temperature changes the draw, not the logprobs", async () => {
    const { engine, executor } = await makeEngine();
    const hot = await engine.generateTokens({ tokenIds: PROMPT, sampling: sampling({ temperature: 2, seed: 3, logprobs: 0 }) });
    const lps: TokenLogprob[] = hot.logprobs!;
    let furthest = 0;
    for (const [i, lp] of lps.entries()) {
      const row = executor.rows[i]![0]!;
      expect(lp.logprob).toBeCloseTo(directLogprob(row, hot.tokenIds[i]!), 6);
      furthest = Math.max(furthest, Math.abs(lp.logprob - directLogprob(row.map((x) => x / 2), hot.tokenIds[i]!)));
      expect(lp.topLogprobs).toEqual([]);
    }
    // ... and not the tempered distribution the draw used.
    expect(furthest).toBeGreaterThan(1e-3);
    // The same seed without logprobs draws the same tokens.
    const again = await engine.generateTokens({ tokenIds: PROMPT, sampling: sampling({ temperature: 2, seed: 3 }) });
    expect(again.tokenIds).toEqual(hot.tokenIds);
  });

  it("sends logprobs in token frames, one per token id, and none when not asked", async () => {
    const { engine } = await makeEngine();
    const frames = (logprobs?: number) =>
      new Promise<{ tokenIds: number[]; logprobs?: TokenLogprob[] }[]>((resolve) => {
        const out: { tokenIds: number[]; logprobs?: TokenLogprob[] }[] = [];
        engine.submit(
          { requestId: "r", mode: "full", messages: [{ role: "user", content: "hi" }], sampling: sampling({ maxTokens: 6, ...(logprobs === undefined ? {} : { logprobs }) }) },
          (f) => (f.type === "token" ? out.push(f) : resolve(out)),
        );
      });
    const asked = await frames(2);
    const withIds = asked.filter((f) => f.tokenIds.length > 0);
    expect(withIds).toHaveLength(6);
    for (const f of withIds) expect(f.logprobs).toHaveLength(f.tokenIds.length);
    for (const f of await frames()) expect("logprobs" in f).toBe(false);
  });
});
