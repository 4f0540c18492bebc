import type { ChatMessage, ToolDefinition } from "../protocol/messages";
import { commonPrefixLength } from "../protocol/common-prefix";
import { mulberry32 } from "../protocol/random";
import type { ChatCodec } from "../gpu-backend/engine/chat-codec";
import { makeWorkload, type WorkloadTrajectory } from "./kit/workload";

/**
 * The workloads of `npm run bench -- llamacpp`, as TOKEN ID arrays, so our engine and llama.cpp
 * are fed exactly the same tokens whatever either generates. Built from the model's chat codec
 * (template + tokenizer) and seeded agent text (`makeWorkload`); deterministic.
 *
 *   decode      one ~1,000-token chat prompt, then `generate` tokens (quick 32, full 128)
 *   prefill     one ~2,000-token chat prompt, evaluated fresh
 *   trajectory  one 20-turn agent trajectory (~1,100-token first prompt: system prompt, 4 tools, task)
 *   concurrent  8 trajectories x 5 turns sharing one ~1,500-token system prompt, run together
 *
 * A trajectory's turn i prompt is the template's render of the transcript up to turn i with the
 * generation prompt: the system prompt and task, then for each earlier turn a SCRIPTED assistant
 * reply (a sentence and one tool call) and the tool's observation. Each turn generates exactly
 * `generate` tokens (greedy, EOS ignored) that are then discarded, so both engines see identical
 * prompts; turn i + 1's prompt extends turn i's (asserted), so an engine can keep the common
 * prefix's KV and evaluate only the new suffix.
 */
export interface TokenTrajectory {
  id: string;
  /** Turn i's whole prompt (token ids), turn 0 first; each one extends the one before. */
  prompts: number[][];
  /** Tokens to generate per turn, greedy, EOS ignored; discarded before the next turn. */
  generate: number;
}

export interface LlamaCppWorkloads {
  decode: { prompt: number[]; generate: number };
  prefill: { prompt: number[] };
  trajectory: TokenTrajectory;
  /** Run concurrently; every prompt starts with the same system prompt (`sharedPrefixTokens`). */
  concurrent: { trajectories: TokenTrajectory[]; sharedPrefixTokens: number };
}

export interface LlamaCppWorkloadOptions {
  codec: Codec;
  /** Decode generates 32 tokens instead of 128; the other workloads are the same. */
  quick: boolean;
  /** Default 11. */
  seed?: number;
}

/**
 * Sizes of the workloads, in tokens: a first prompt's length is within 3% of its target (the
 * system prompt is sized, never cut); observations are drawn uniformly in `observationTokens`.
 */
export const LLAMACPP_WORKLOAD_SIZES = {
  decodeContext: 1000,
  decodeTokens: { quick: 32, full: 128 },
  prefillPrompt: 2000,
  /** One trajectory whose first prompt (system, 4 tools, task) is ~1,100 tokens; the 20th ~5,800. */
  trajectory: { turns: 20, firstPromptTokens: 1100, generate: 16 },
  /** The shared system prompt is the first prompt less the task (~70 tokens): ~1,500. */
  concurrent: { trajectories: 8, turns: 5, firstPromptTokens: 1570, generate: 16 },
  observationTokens: [100, 300] as [number, number],
} as const;

/**
 * The four workloads for a model's codec.
 *
 * @example
 * const { codec } = await loadModel({ dir: undefined });
 * const w = makeLlamaCppWorkloads({ codec, quick: true });
 * w.trajectory.prompts.length; // 20
 * w.trajectory.prompts[19].length; // ~5,800 tokens
 */
export function makeLlamaCppWorkloads(o: LlamaCppWorkloadOptions): LlamaCppWorkloads {
  const seed = o.seed ?? 11;
  const sizes = LLAMACPP_WORKLOAD_SIZES;
  const single = (target: number, s: number) => renderTurn(o.codec, sizedAgentWorkload(o.codec, 1, 1, target, s)[0]!, 0);
  const trajectory = scriptedTrajectories(o.codec, sizedAgentWorkload(o.codec, 1, sizes.trajectory.turns, sizes.trajectory.firstPromptTokens, seed + 2), sizes.trajectory.generate, seed + 3)[0]!;
  const concurrent = scriptedTrajectories(o.codec, sizedAgentWorkload(o.codec, sizes.concurrent.trajectories, sizes.concurrent.turns, sizes.concurrent.firstPromptTokens, seed + 4), sizes.concurrent.generate, seed + 5);
  return {
    decode: { prompt: single(sizes.decodeContext, seed), generate: o.quick ? sizes.decodeTokens.quick : sizes.decodeTokens.full },
    prefill: { prompt: single(sizes.prefillPrompt, seed + 1) },
    trajectory,
    concurrent: { trajectories: concurrent, sharedPrefixTokens: sharedPrefix(concurrent.map((t) => t.prompts[0]!)) },
  };
}

/**
 * Tools offered in every workload (`makeWorkload` defines 12 of ~220 tokens each); with the
 * shortest system text (50 tokens) and a task, a first prompt is at least ~1,030 tokens.
 */
const TOOLS = 4;

/**
 * `makeWorkload` with its first tools only and a system prompt sized so that the first
 * turn's rendered prompt (system, tools, task) is within 3% of `firstPromptTokens` (calibrated on
 * one turn: the system text is drawn before anything else, so the same `systemTokens` gives the
 * same system prompt).
 */
function sizedAgentWorkload(codec: Codec, trajectories: number, turns: number, firstPromptTokens: number, seed: number): WorkloadTrajectory[] {
  const countTokens = (text: string) => codec.encode(text).length;
  const make = (n: number, k: number, systemTokens: number) =>
    makeWorkload({ trajectories: n, turns: k, systemTokens, observationTokens: LLAMACPP_WORKLOAD_SIZES.observationTokens, replyTokens: [16, 16], seed, countTokens });
  const withTools = (trajectories: WorkloadTrajectory[]) => trajectories.map((t) => ({ ...t, tools: t.tools.slice(0, TOOLS) }));
  // makeWorkload subtracts all 12 tools from systemTokens (its system text is at least 50
  // tokens); only TOOLS of them are rendered.
  const probe = make(1, 1, 0)[0]!;
  let systemTokens = countTokens(JSON.stringify(probe.tools)) + 50 + firstPromptTokens - renderTurn(codec, withTools([probe])[0]!, 0).length;
  let best = { systemTokens, error: Infinity };
  for (let i = 0; i < 6 && best.error > firstPromptTokens * 0.03; i++) {
    const error = renderTurn(codec, withTools(make(1, 1, systemTokens))[0]!, 0).length - firstPromptTokens;
    if (Math.abs(error) < best.error) best = { systemTokens, error: Math.abs(error) };
    systemTokens -= error;
  }
  systemTokens = best.systemTokens;
  return withTools(make(trajectories, turns, systemTokens));
}

type Codec = Pick<ChatCodec, "render" | "encode">;

/** Turn k's prompt of a trajectory without assistant replies (k = 0: system and task). */
function renderTurn(codec: Codec, traj: WorkloadTrajectory, k: number): number[] {
  return renderMessages(codec, traj.tools, traj.turns.slice(0, k + 1).flatMap((t) => t.newMessages));
}

function renderMessages(codec: Codec, tools: ToolDefinition[], messages: ChatMessage[]): number[] {
  return codec.encode(codec.render({ messages, tools, addGenerationPrompt: true }));
}

/**
 * Token prompts of agent trajectories with scripted assistant replies between the turns: before
 * turn k's observation (tool_call_id `call_<t>_<k>`), a reply of a few words and one call of a
 * seeded tool with that id.
 *
 * @throws Error when a turn's prompt does not extend the previous one (a template that rewrites history)
 */
function scriptedTrajectories(codec: Codec, workload: WorkloadTrajectory[], generate: number, seed: number): TokenTrajectory[] {
  const rand = mulberry32(seed);
  return workload.map((traj, t) => {
    const words = (traj.turns[0]!.newMessages[0]!.content ?? "").split(" ").slice(5);
    const some = (n: number) => Array.from({ length: n }, () => words[Math.floor(rand() * words.length)]).join(" ");
    const messages: ChatMessage[] = [];
    const prompts: number[][] = [];
    traj.turns.forEach((turn, k) => {
      if (k > 0) {
        const tool = traj.tools[Math.floor(rand() * traj.tools.length)]!.function;
        const arg = Object.keys((tool.parameters as { properties: Record<string, unknown> }).properties)[0]!;
        messages.push({
          role: "assistant",
          content: `I will ${some(8 + Math.floor(rand() * 8))}.`,
          tool_calls: [{ id: `call_${t}_${k}`, type: "function", function: { name: tool.name, arguments: JSON.stringify({ [arg]: some(3) }) } }],
        });
      }
      messages.push(...turn.newMessages);
      const prompt = renderMessages(codec, traj.tools, messages);
      const previous = prompts.at(-1);
      if (previous && commonPrefixLength(previous, prompt) !== previous.length) {
        throw new Error(`${traj.id}: turn ${k}'s prompt does not extend turn ${k - 1}'s (the chat template rewrites earlier turns)`);
      }
      prompts.push(prompt);
    });
    return { id: traj.id, prompts, generate };
  });
}

/** Length of the prefix all of `arrays` share. */
function sharedPrefix(arrays: number[][]): number {
  const [first, ...rest] = arrays;
  return first ? rest.reduce((n, a) => Math.min(n, commonPrefixLength(first, a)), first.length) : 0;
}

/** n_batch = n_ubatch values tried on the prefill prompt. */
export const BATCH_SIZES = [256, 512, 1024, 2048] as const;
export const QUICK_BATCH_SIZES = [512, 2048] as const;

/**
 * What llama.cpp's side tries per mode: the prefill prompt at each batch size x flash setting,
 * `prefillRepeats` times each; decode at each flash setting, `decodeRepeats` times each; the best
 * kept. `trials` counts them: our side (one setup) takes as many repeats and keeps its best, so
 * neither engine's figure is the best of more tries than the other's (llamacpp-ours.ts).
 */
export function llamaCppTrials(o: { quick: boolean; smoke?: boolean | undefined }) {
  const batchSizes: readonly number[] = o.smoke ? [512] : o.quick ? QUICK_BATCH_SIZES : BATCH_SIZES;
  const flashSettings = o.smoke ? [false] : [false, true];
  const prefillRepeats = o.quick ? 1 : 2;
  const decodeRepeats = o.smoke ? 1 : o.quick ? 2 : 3;
  return {
    batchSizes,
    flashSettings,
    prefillRepeats,
    decodeRepeats,
    trials: { prefill: batchSizes.length * flashSettings.length * prefillRepeats, decode: flashSettings.length * decodeRepeats },
  };
}
