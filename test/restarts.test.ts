import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ChatMessage } from "../protocol/messages";
import { startBenchStack, type BenchStack } from "../bench/kit/stack";
import { createTrajectory, servedModel, storedMessages, trajectoryState, transcriptDifference } from "../bench/kit/trajectory-view";
import { sendTurn, TurnFailed, type TurnParams, type TurnReply } from "../bench/kit/turn-client";

/**
 * Restarts with nothing lost (issue 19): one real backend and `wrangler dev` with its Durable
 * Object storage in a folder on disk. The edge is restarted between turns (SIGTERM) and killed
 * in the middle of a streamed turn (SIGKILL); the backend is SIGKILLed and started again on its
 * port (its turn states gone). After each, the trajectory goes on from its stored transcript:
 * nothing lost, nothing duplicated, and every answer equals the oracle's, the same transcript
 * sent as a stateless turn (greedy decoding of the random model is a function of the prompt).
 *
 * The model is the backend's embedded demo model, not tiny-llama-random: that one answers these
 * prompts with runs of single "\n" tokens, which the tokenizer encodes as one token when the
 * transcript is rendered again. A delta turn keeps the model's own reply tokens (prompt-builder.ts),
 * so its prompt then differs from the stateless oracle's by design, and its answers say nothing.
 */
const MAX_TOKENS = 16;

describe("restarts: wrangler dev and the backend restarted mid-trajectory", () => {
  let stack: BenchStack | undefined;
  let edgeUrl: string;
  let model: string;
  const lines: string[] = [];
  /** What each trajectory's client holds: every message it sent and every reply it got. */
  const held = new Map<string, ChatMessage[]>();

  beforeAll(async () => {
    stack = await startBenchStack({
      name: "restarts",
      backends: 1,
      backend: { kvMemory: "64MiB", threads: 1 },
      onLine: (line) => {
        lines.push(line);
        if (lines.length > 300) lines.shift();
      },
    });
    edgeUrl = stack.edgeUrl;
    model = await servedModel(edgeUrl);
  }, 300_000);

  afterAll(async () => {
    await stack?.close();
  });

  /** One turn of trajectory `id` with one new user message; appends it and the reply to what the client holds. */
  const turn = async (id: string, via: "session" | "chat", text: string, extra: Partial<TurnParams> = {}): Promise<TurnReply> => {
    const transcript = held.get(id)!;
    const message: ChatMessage = { role: "user", content: text };
    const reply = await sendTurn({ edgeUrl, model, via, trajectoryId: id, messages: via === "session" ? [message] : [...transcript, message], maxTokens: MAX_TOKENS, stream: false, ...extra });
    transcript.push(message, { role: "assistant", content: reply.content });
    return reply;
  };
  const begin = async (id: string, via: "session" | "chat", turns: number) => {
    if (via === "session") await createTrajectory(edgeUrl, id);
    held.set(id, [{ role: "system", content: `You are agent ${id}. ${"Follow the plan. ".repeat(20)}` }]);
    // The first session turn sends the system message too.
    const first: ChatMessage = { role: "user", content: "Start." };
    const reply = await sendTurn({ edgeUrl, model, via, trajectoryId: id, messages: [...held.get(id)!, first], maxTokens: MAX_TOKENS, stream: false });
    held.get(id)!.push(first, { role: "assistant", content: reply.content });
    for (let k = 2; k <= turns; k++) await turn(id, via, `Step ${k}.`);
  };
  /** The same transcript (without its last reply) as a stateless turn. */
  const oracle = (id: string) => sendTurn({ edgeUrl, model, via: "chat", messages: held.get(id)!.slice(0, -1), maxTokens: MAX_TOKENS, stream: false });
  const expectStoredAsHeld = async (id: string) => {
    expect(transcriptDifference(await storedMessages(edgeUrl, id), held.get(id)!), `${id}'s stored transcript`).toBeUndefined();
    expect((await trajectoryState(edgeUrl, id)).message_count).toBe(held.get(id)!.length);
  };

  it("continues a trajectory from its stored transcript after wrangler dev restarts, as a delta on the backend's kept state", async () => {
    await begin("edge-restart-session", "session", 3);
    await begin("edge-restart-chat", "chat", 2);
    const before = await trajectoryState(edgeUrl, "edge-restart-session");
    expect(before.turns).toHaveLength(3);

    await stack!.stopEdge("SIGTERM");
    await expect(fetch(`${edgeUrl}/healthz`)).rejects.toThrow();
    await stack!.startEdge();

    for (const [id, via, turnsBefore] of [["edge-restart-session", "session", 3], ["edge-restart-chat", "chat", 2]] as const) {
      const reply = await turn(id, via, "After the edge restart.");
      const state = await trajectoryState(edgeUrl, id);
      // Every earlier turn still listed, one more, stored once.
      expect(state.turns.map((t) => t.turn)).toEqual(Array.from({ length: turnsBefore + 1 }, (_, i) => i + 1));
      expect(state.message_count).toBe(1 + 2 * (turnsBefore + 1));
      await expectStoredAsHeld(id);
      // The pin and the backend's state id are in the Durable Object's storage, and the backend kept
      // its state: the turn is a delta reusing the cached transcript.
      expect(state.turns.at(-1)).toMatchObject({ mode: "delta", full_reason: null, route: "pinned" });
      expect(state.turns.at(-1)!.cached_tokens).toBeGreaterThan(0);
      const o = await oracle(id);
      expect(reply.content).toBe(o.content);
      expect(reply.promptTokens).toBe(o.promptTokens);
    }
  });

  it("stores nothing of a streamed turn cut by SIGKILL to wrangler dev; the retry after the restart is stored once", async () => {
    const id = "edge-killed";
    await begin(id, "session", 2);
    const before = await trajectoryState(edgeUrl, id);
    const message: ChatMessage = { role: "user", content: "Write a long answer." };
    let killing: Promise<void> | undefined;
    // A long turn (the demo model decodes 1,500 tokens in seconds here); the kill goes on its first chunk.
    const failed = await sendTurn({ edgeUrl, model, via: "session", trajectoryId: id, messages: [message], maxTokens: 1500, stream: true, idempotencyKey: "edge-killed-3", onChunk: () => void (killing ??= stack!.stopEdge("SIGKILL")) }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await killing;
    expect(killing, "the turn streamed a chunk before it ended").toBeDefined();
    expect(failed).toBeInstanceOf(TurnFailed);
    expect((failed as TurnFailed).code).toMatch(/^(cut|connection)$/);

    await stack!.startEdge();
    const mid = await trajectoryState(edgeUrl, id);
    expect(mid.message_count).toBe(before.message_count);
    expect(mid.turns).toEqual(before.turns);
    await expectStoredAsHeld(id);

    // The client retries the turn (shorter) with the same Idempotency-Key: it runs. Had the cut turn
    // been stored under the key, the retry would be refused (400: another request under the key).
    const retry = await sendTurn({ edgeUrl, model, via: "session", trajectoryId: id, messages: [message], maxTokens: MAX_TOKENS, stream: false, idempotencyKey: "edge-killed-3" });
    expect(retry.replayed).toBe(false);
    held.get(id)!.push(message, { role: "assistant", content: retry.content });
    const after = await trajectoryState(edgeUrl, id);
    expect(after.turns).toHaveLength(3);
    expect(after.message_count).toBe(before.message_count + 2);
    await expectStoredAsHeld(id);
    expect(retry.content).toBe((await oracle(id)).content);
    // The backend dropped the cut turn's sequence and kept the state of the turn before: a delta.
    const last = after.turns.at(-1)!;
    expect(last).toMatchObject({ mode: "delta", full_reason: null, route: "pinned" });
    expect(last.cached_tokens).toBeGreaterThan(0);
  });

  it("resends the full transcript once a restarted backend no longer knows the state, and goes on as deltas", async () => {
    const id = "edge-restart-session";
    const before = await trajectoryState(edgeUrl, id);
    await stack!.stopBackend(0, "SIGKILL");
    await stack!.startBackend(0);

    const reply = await turn(id, "session", "After the backend restart.");
    const state = await trajectoryState(edgeUrl, id);
    expect(state.turns).toHaveLength(before.turns.length + 1);
    expect(state.message_count).toBe(before.message_count + 2);
    await expectStoredAsHeld(id);
    // Pinned to the same backend URL, the delta met `state_unknown`; the edge resent the transcript in full.
    expect(state.turns.at(-1)).toMatchObject({ mode: "full", full_reason: "state-unknown", route: "pinned", cached_tokens: 0 });
    const o = await oracle(id);
    expect(reply.content).toBe(o.content);
    expect(reply.promptTokens).toBe(o.promptTokens);
    expect(state.turns.at(-1)!.prompt_tokens).toBe(o.promptTokens);

    // The chat trajectory too: its whole transcript, diffed against the stored one, then in full.
    const chatReply = await turn("edge-restart-chat", "chat", "After the backend restart.");
    const chatState = await trajectoryState(edgeUrl, "edge-restart-chat");
    expect(chatState.turns.at(-1)).toMatchObject({ mode: "full", full_reason: "state-unknown" });
    await expectStoredAsHeld("edge-restart-chat");
    expect(chatReply.content).toBe((await oracle("edge-restart-chat")).content);

    await turn(id, "session", "And on.");
    const next = (await trajectoryState(edgeUrl, id)).turns.at(-1)!;
    expect(next).toMatchObject({ mode: "delta", full_reason: null });
    expect(next.cached_tokens).toBeGreaterThan(0);
    await expectStoredAsHeld(id);
  });
});
