import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../gpu-backend/engine/load-model";
import type { ChatCodec } from "../gpu-backend/engine/chat-codec";
import { commonPrefixLength } from "../protocol/common-prefix";
import { LLAMACPP_WORKLOAD_SIZES, llamaCppTrials, makeLlamaCppWorkloads, type LlamaCppWorkloads } from "./llamacpp-workload";
import { tinyModelDir } from "../gpu-backend/model/testing/tiny-model";

let dir: string;
let codec: ChatCodec;
let quick: LlamaCppWorkloads;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "llamacpp-workload-"));
  // The tiny model has the demo model's tokenizer and chat template.
  codec = (await loadModel({ dir: await tinyModelDir(dir) })).codec;
  quick = makeLlamaCppWorkloads({ codec, quick: true });
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const near = (n: number, target: number) => Math.abs(n - target) <= target * 0.03;

describe("makeLlamaCppWorkloads", () => {
  it("is deterministic, and --full only generates more decode tokens", () => {
    const full = makeLlamaCppWorkloads({ codec, quick: false });
    expect(full).toEqual({ ...quick, decode: { ...quick.decode, generate: 128 } });
    expect(quick.decode.generate).toBe(32);
    expect(makeLlamaCppWorkloads({ codec, quick: true, seed: 12 }).prefill.prompt).not.toEqual(quick.prefill.prompt);
  });

  it("sizes the decode context and the prefill prompt within 3% of 1,000 and 2,000 tokens, chat prompts ending in the generation prompt", () => {
    expect(near(quick.decode.prompt.length, LLAMACPP_WORKLOAD_SIZES.decodeContext)).toBe(true);
    expect(near(quick.prefill.prompt.length, LLAMACPP_WORKLOAD_SIZES.prefillPrompt)).toBe(true);
    for (const prompt of [quick.decode.prompt, quick.prefill.prompt]) expect(codec.decode(prompt).endsWith("<|im_start|>assistant\n")).toBe(true);
  });

  it("gives the trajectory 20 turns, each prompt extending the last by a scripted tool call and an observation", () => {
    const { prompts, generate } = quick.trajectory;
    expect(prompts.length).toBe(20);
    expect(generate).toBe(16);
    expect(near(prompts[0]!.length, LLAMACPP_WORKLOAD_SIZES.trajectory.firstPromptTokens)).toBe(true);
    for (let k = 1; k < prompts.length; k++) {
      expect(commonPrefixLength(prompts[k - 1]!, prompts[k]!), `turn ${k}`).toBe(prompts[k - 1]!.length);
      const added = codec.decode(prompts[k]!.slice(prompts[k - 1]!.length));
      expect(added).toMatch(/^I will [^\n]+\.\n<tool_call>\n\{"name": "tool_\d+_\w+", "arguments": \{"arg_0_\w+":"[\w ]+"\}\}\n<\/tool_call><\|im_end\|>\n<\|im_start\|>user\n<tool_response>\n/);
      expect(added.endsWith("\n</tool_response><|im_end|>\n<|im_start|>assistant\n")).toBe(true);
    }
    expect(prompts[19]!.length).toBeGreaterThan(4000);
  });

  it("gives 8 concurrent trajectories of 5 turns one ~1,500-token system prompt, then their own tasks", () => {
    const { trajectories, sharedPrefixTokens } = quick.concurrent;
    expect(trajectories.map((t) => t.prompts.length)).toEqual(Array(8).fill(5));
    expect(near(sharedPrefixTokens, 1500)).toBe(true);
    const firsts = trajectories.map((t) => t.prompts[0]!);
    for (const t of trajectories) for (const p of t.prompts) expect(commonPrefixLength(p, firsts[0]!)).toBeGreaterThanOrEqual(sharedPrefixTokens);
    expect(new Set(firsts.map((p) => codec.decode(p.slice(sharedPrefixTokens)))).size).toBe(8);
  });
});

describe("llamaCppTrials", () => {
  it("counts llama.cpp's tries per measurement (setups x repeats), which our side repeats as often", () => {
    expect(llamaCppTrials({ quick: false }).trials).toEqual({ prefill: 4 * 2 * 2, decode: 2 * 3 });
    expect(llamaCppTrials({ quick: true }).trials).toEqual({ prefill: 2 * 2 * 1, decode: 2 * 2 });
    expect(llamaCppTrials({ quick: true, smoke: true }).trials).toEqual({ prefill: 1, decode: 1 });
  });
});
