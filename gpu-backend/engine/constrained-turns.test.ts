import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Ajv } from "ajv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DoneFrame, ErrorFrame, Frame, GenerateRequest, ReplyConstraint, ReplyDelta, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { BlockPool } from "../kv/block-pool";
import { CpuExecutor } from "../model/executors/cpu-executor";
import { tinyFamilyConfig } from "../model/checkpoint/demo-families";
import { materializeModel } from "../model/checkpoint/demo-model";
import { writeFamilyTokenizer } from "../model/checkpoint/family-tokenizers";
import { ConstrainedReply } from "../constraint/constrained-reply";
import { GrammarCache } from "../constraint/grammar-cache";
import { replyPlan } from "../constraint/reply-grammar";
import { allows, ReplyMatcher } from "../constraint/reply-matcher";
import { replyDeltasMismatch, sumReplyDeltas } from "../tokenizer/reply-deltas";
import { loadModel, type LoadedModel } from "./load-model";
import type { Engine } from "./engine";
import { createEngine } from "./create-engine";
import { argmax } from "./sampler";
import type { DraftContext } from "../speculative/draft-source";

/**
 * Constrained decoding in the engine on the tiny Qwen3-template checkpoint (random weights: it
 * never writes a tool call or closes a string on its own): forced tool calls, JSON responses and
 * the token budget, checked with ajv against the schemas.
 */
const root = mkdtempSync(join(tmpdir(), "constrained-"));
/**
 * Test-only drafts (none unless a test sets `full`): the tokens that follow the context in `full`
 * (a reply generated before), or with `wrong` each shifted by one.
 */
const drafts = {
  full: [] as number[],
  wrong: false,
  propose(c: DraftContext, max: number): number[] {
    if (this.full.length === 0 || c.tokenIds.some((t, i) => this.full[i] !== t)) return [];
    return this.full.slice(c.tokenIds.length, c.tokenIds.length + max).map((t) => (this.wrong ? (t + 1) % model.spec.vocabSize : t));
  },
};
let engine: Engine;
let executor: CpuExecutor;
let model: LoadedModel;
beforeAll(async () => {
  const tokDir = join(root, "tok");
  const info = await writeFamilyTokenizer("qwen3", tokDir);
  const dir = await materializeModel({ dir: join(root, "m"), config: tinyFamilyConfig("qwen3", info), seed: 5, tokenizerFrom: tokDir });
  model = await loadModel({ dir });
  executor = await CpuExecutor.create({ spec: model.spec, weights: model.weights, numBlocks: 256, blockSize: 16, threads: 1 });
  engine = createEngine({ executor, pool: new BlockPool({ numBlocks: 256, blockSize: 16 }), codec: model.codec, modelId: model.spec.modelId, scheduler: { maxBatchTokens: 512, maxRunningSequences: 16, blockSize: 16 }, enablePrefixCache: true, backendId: "t", speculative: { source: drafts, maxDraftTokens: 4 } });
}, 120_000);
afterAll(async () => {
  await executor?.dispose();
  rmSync(root, { recursive: true, force: true });
});

const ajv = new Ajv({ strict: false });
const sampling = (maxTokens: number, seed: number, temperature = 1): SamplingParams => ({ maxTokens, temperature, topP: 1, topK: 0, seed, stop: [], stopTokenIds: [] });
const WEATHER = { type: "object", properties: { city: { type: "string" }, unit: { enum: ["c", "f"] }, days: { type: "integer", minimum: 1, maximum: 14 }, tags: { type: "array", items: { type: "string" } } }, required: ["city", "unit", "days"], additionalProperties: false };
const TIME = { type: "object", properties: { tz: { type: "string" }, detail: { type: "object", properties: { seconds: { type: "boolean" } }, required: ["seconds"] } }, required: ["tz", "detail"] };
const tools: ToolDefinition[] = [
  { type: "function", function: { name: "get_weather", parameters: WEATHER, strict: true } },
  { type: "function", function: { name: "get_time", parameters: TIME } },
];

/** Each done frame's token frames' `reply` deltas (undefined where a frame had none). */
const deltasOf = new WeakMap<DoneFrame, (ReplyDelta | undefined)[]>();

function run(constraint: ReplyConstraint | undefined, s: SamplingParams, t: ToolDefinition[] | undefined = tools, speculative?: boolean): Promise<DoneFrame | ErrorFrame> {
  const req: GenerateRequest = { requestId: crypto.randomUUID(), mode: "full", messages: [{ role: "user", content: "What is the weather in Paris?" }], sampling: s, ...(t ? { tools: t } : {}), ...(constraint ? { constraint } : {}), ...(speculative === undefined ? {} : { speculative }) };
  const deltas: (ReplyDelta | undefined)[] = [];
  return new Promise((resolve) =>
    engine.submit(req, (f: Frame) => {
      if (f.type === "token") deltas.push(f.reply);
      else if (f.type === "done") deltasOf.set(f, deltas);
      if (f.type === "done" || f.type === "error") resolve(f);
    }),
  );
}

/** The turn's done frame; its token frames' deltas add up to its message (tool-call-stream.ts, the ReplyDelta contract). */
function done(f: DoneFrame | ErrorFrame): DoneFrame {
  if (f.type === "error") throw new Error(`${f.code}: ${f.message}`);
  const deltas = deltasOf.get(f)!;
  expect(deltas.every((d) => d !== undefined)).toBe(true);
  expect(replyDeltasMismatch(deltas, f.message), f.text).toBeUndefined();
  // Each call streamed: its name came in an earlier frame than its last arguments piece.
  for (const call of sumReplyDeltas(deltas).calls) expect(call.opened, f.text).toBeLessThan(call.last);
  return f;
}

describe("constrained decoding in the engine", () => {
  it("tool_choice required: every reply is tool calls whose arguments validate", async () => {
    for (let seed = 1; seed <= 6; seed++) {
      const f = done(await run({ type: "tool_calls", choice: "required", parallel: seed % 2 === 0 }, sampling(200, seed)));
      console.log(seed, f.finishReason, f.usage.completionTokens, JSON.stringify(f.text).slice(0, 300));
      expect(f.finishReason).toBe("stop");
      expect(f.message.tool_calls?.length).toBeGreaterThan(0);
      for (const call of f.message.tool_calls!) {
        const schema = call.function.name === "get_weather" ? WEATHER : TIME;
        expect(ajv.validate(schema, JSON.parse(call.function.arguments)), `${call.function.arguments}: ${ajv.errorsText()}`).toBe(true);
      }
    }
  }, 120_000);

  it("json_schema and json_object replies parse and validate, also with a small budget", async () => {
    for (const [maxTokens, seed] of [[300, 1], [40, 2], [25, 3]] as const) {
      const f = done(await run({ type: "json_schema", schema: WEATHER, strict: true }, sampling(maxTokens, seed), undefined));
      console.log(maxTokens, f.finishReason, f.usage.completionTokens, JSON.stringify(f.text));
      expect(f.usage.completionTokens).toBeLessThanOrEqual(maxTokens);
      expect(ajv.validate(WEATHER, JSON.parse(f.text))).toBe(true);
      expect(f.finishReason).toBe("stop");
    }
    const o = done(await run({ type: "json_object" }, sampling(30, 4), undefined));
    expect(typeof JSON.parse(o.text)).toBe("object");
  }, 120_000);

  it("tool_choice auto with a JSON answer: each reply is valid calls or the valid answer, never free text", async () => {
    const kinds = new Map<string, number>();
    for (let seed = 1; seed <= 8; seed++) {
      const answer = seed % 4 === 0 ? ({ type: "json_object" } as const) : ({ type: "json_schema", schema: WEATHER, strict: true } as const);
      const f = done(await run({ type: "tool_calls", choice: "auto", parallel: true, answer }, sampling(120, seed)));
      console.log(seed, f.finishReason, f.usage.completionTokens, JSON.stringify(f.text).slice(0, 200));
      expect(f.finishReason).toBe("stop");
      const calls = f.message.tool_calls ?? [];
      expect(calls.length).toBeLessThanOrEqual(1); // with an answer, auto is the answer or one call
      kinds.set(calls.length > 0 ? "calls" : "answer", (kinds.get(calls.length > 0 ? "calls" : "answer") ?? 0) + 1);
      for (const call of calls) {
        const schema = call.function.name === "get_weather" ? WEATHER : TIME;
        expect(ajv.validate(schema, JSON.parse(call.function.arguments)), `${call.function.arguments}: ${ajv.errorsText()}`).toBe(true);
      }
      if (calls.length > 0) continue;
      const value: unknown = JSON.parse(f.text);
      if (answer.type === "json_schema") expect(ajv.validate(WEATHER, value), `${f.text}: ${ajv.errorsText()}`).toBe(true);
      else expect(typeof value === "object" && value !== null && !Array.isArray(value), f.text).toBe(true);
    }
    // Seeded sampling on one executor is deterministic: these seeds take both branches.
    expect(Object.fromEntries(kinds)).toEqual({ calls: expect.any(Number), answer: expect.any(Number) });
  }, 120_000);

  it("with speculation: the greedy reply is identical, refused drafts end at the grammar, sampled replies still validate", async () => {
    const json = { type: "json_schema", schema: WEATHER, strict: true } as const;
    const want = done(await run(json, sampling(60, 1, 0), undefined, false));
    expect(want.speculation).toBeUndefined();
    const state = engine.states.get(want.stateId)!;
    drafts.full = [...state.promptTokenIds, ...state.generatedTokenIds];
    try {
      const known = done(await run(json, sampling(60, 1, 0), undefined));
      expect(known.text).toBe(want.text);
      expect(known.speculation!.drafted).toBeGreaterThan(0);
      expect(known.speculation!.accepted).toBe(known.speculation!.drafted);
      drafts.wrong = true;
      const wrong = done(await run(json, sampling(60, 1, 0), undefined));
      expect(wrong.text).toBe(want.text);
      expect(wrong.speculation!.accepted).toBe(0);
      expect(wrong.speculation!.drafted).toBeGreaterThan(0);
      drafts.wrong = false;
      // A draft is cut at the first token the grammar refuses, and checking it leaves the matcher as it was.
      const grammars = await GrammarCache.create(model.codec, model.spec.vocabSize);
      const c = (await ConstrainedReply.start(grammars, model.codec, replyPlan(json, [], model.codec.toolCallConvention), 60))!;
      const ok = model.codec.encode('{"city": "Oslo"'); // then "unit" and "days" are required: "}" is refused
      const refused = model.codec.encode("}")[0]!;
      expect(c.draftPrefix([...ok, refused, ...ok])).toEqual(ok);
      expect(c.draftPrefix([refused])).toEqual([]);
      expect(c.draftPrefix(ok)).toEqual(ok); // nothing was advanced by the checks
      c.dispose();
      // Sampling: the mask applies at every verified position, or the random model would break the JSON.
      for (const seed of [1, 2]) {
        const f = done(await run(json, sampling(60, seed), undefined));
        if (f.finishReason === "stop") expect(ajv.validate(WEATHER, JSON.parse(f.text)), f.text).toBe(true);
      }
    } finally {
      drafts.full = [];
      drafts.wrong = false;
    }
  });

  it("a budget below the shortest valid reply is max_tokens_too_small before any generation", async () => {
    const f = await run({ type: "json_schema", schema: WEATHER, strict: true }, sampling(3, 1), undefined);
    expect(f.type === "error" && f.code).toBe("max_tokens_too_small");
  });

  it("greedy steps that take the row's argmax when the grammar allows it pick what masking the row picks", async () => {
    const grammars = await GrammarCache.create(model.codec, model.spec.vocabSize);
    const V = model.spec.vocabSize;
    let state = 7;
    const random = () => ((state = (Math.imul(state, 1103515245) + 12345) >>> 0) / 2 ** 32);
    for (const constraint of [{ type: "tool_calls", choice: "required", parallel: true }, { type: "tool_calls", choice: "auto", parallel: true }] as const) {
      const plan = replyPlan(constraint, tools, model.codec.toolCallConvention);
      const fast = (await ConstrainedReply.start(grammars, model.codec, plan, 60))!;
      const masked = (await ConstrainedReply.start(grammars, model.codec, plan, 60))!;
      const tracker = await ReplyMatcher.create(grammars, model.codec, plan.grammar!);
      let argmaxAllowed = 0;
      for (let left = 60; left > 0; left--) {
        // Half the rows peak on a token the grammar allows (the fast path), half on a random one.
        const row = Float32Array.from({ length: V }, () => random() * 4);
        const mask = await tracker.mask();
        const peak = Math.floor(random() * V);
        if (random() < 0.5) {
          const ok = [...Array(V).keys()].filter((id) => allows(mask, id));
          row[ok[Math.floor(random() * ok.length)]!] = 9;
        } else row[peak] = 9;
        const top = argmax(row);
        if (allows(mask, top)) argmaxAllowed++;
        const a = await fast.next(row.slice(), argmax, left, top);
        const b = await masked.next(row.slice(), argmax, left);
        expect(a, `${constraint.choice} with ${left} tokens left`).toEqual(b);
        if (a.tokenId !== null) expect(tracker.accept(a.tokenId)).toBe(true);
        if (a.end) break;
      }
      expect(argmaxAllowed, constraint.choice).toBeGreaterThan(3);
      for (const r of [fast, masked, tracker]) r.dispose();
    }
  }, 120_000);
});
