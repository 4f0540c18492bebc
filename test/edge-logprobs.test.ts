import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTokenLogprob, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack } from "../scripts/stack";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * `logprobs` / `top_logprobs` end to end: a real backend process and `wrangler dev` (workerd, real
 * Durable Objects with SQLite), driven by the official `openai` client, streaming and not.
 */
const MODEL = "tiny-llama-random";
const AUTH = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };

describe("logprobs end to end (wrangler dev + backend + openai client)", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  let client: OpenAI;

  beforeAll(async () => {
    fixture = await startTestStack({ name: "logprobs", kvMemory: "32MiB", threads: 1 });
    ({ stack } = fixture);
    client = new OpenAI({ apiKey: "sk-local-dev", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0 });
  });

  afterAll(() => fixture?.stop());

  // Under one KV block (16 tokens) of prompt: nothing is cached, so every request computes the
  // same logits from scratch and streaming and non-streaming answers can be compared exactly.
  const short: ChatCompletionMessageParam[] = [{ role: "user", content: "Hi" }];

  /**
   * The invariants of one answer's logprobs with `top` alternatives. Greedy: the chosen token is
   * the top-1, at least as likely as every alternative.
   */
  function checkLogprobs(content: ChatCompletionTokenLogprob[], text: string, top: number, greedy = true) {
    expect(content.length).toBeGreaterThan(0);
    for (const t of content) {
      expect(Object.keys(t).sort()).toEqual(["bytes", "logprob", "token", "top_logprobs"]);
      expect(t.logprob).toBeLessThanOrEqual(0);
      expect(t.top_logprobs).toHaveLength(top);
      for (const [k, alt] of t.top_logprobs.entries()) {
        expect(Object.keys(alt).sort()).toEqual(["bytes", "logprob", "token"]);
        if (greedy) expect(t.logprob).toBeGreaterThanOrEqual(alt.logprob);
        if (k > 0) expect(t.top_logprobs[k - 1]!.logprob).toBeGreaterThanOrEqual(alt.logprob);
      }
      if (greedy && top > 0) {
        expect(t.top_logprobs[0]!.logprob).toBe(t.logprob);
        expect(t.top_logprobs[0]!.token).toBe(t.token);
        expect(t.top_logprobs[0]!.bytes).toEqual(t.bytes);
      }
      expect(t.top_logprobs.reduce((s, alt) => s + Math.exp(alt.logprob), 0)).toBeLessThanOrEqual(1 + 1e-9);
      expect(t.bytes!.every((b) => Number.isInteger(b) && b >= 0 && b <= 255)).toBe(true);
    }
    // The tokens' raw bytes spell the reply; their texts too, unless a character spans tokens.
    expect(new TextDecoder().decode(Uint8Array.from(content.flatMap((t) => t.bytes!)))).toBe(text);
    if (!content.some((t) => t.token.includes("\uFFFD"))) expect(content.map((t) => t.token).join("")).toBe(text);
  }

  it("answers non-streaming logprobs in OpenAI's shape, greedy invariants holding", async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages: short, max_tokens: 12, temperature: 0, logprobs: true, top_logprobs: 5 });
    const choice = r.choices[0]!;
    expect(r.usage!.prompt_tokens).toBeLessThan(16);
    expect(Object.keys(choice.logprobs!).sort()).toEqual(["content", "refusal"]);
    expect(choice.logprobs!.refusal).toBeNull();
    expect(choice.logprobs!.content).toHaveLength(r.usage!.completion_tokens - (choice.finish_reason === "stop" ? 1 : 0));
    checkLogprobs(choice.logprobs!.content!, choice.message.content!, 5);
  });

  it("gives null logprobs when not asked, and only the chosen token's for top_logprobs 0 or absent", async () => {
    const none = await client.chat.completions.create({ model: MODEL, messages: short, max_tokens: 4, temperature: 0 });
    expect(none.choices[0]!.logprobs).toBeNull();
    for (const extra of [{ top_logprobs: 0 }, {}]) {
      const r = await client.chat.completions.create({ model: MODEL, messages: short, max_tokens: 4, temperature: 0, logprobs: true, ...extra });
      checkLogprobs(r.choices[0]!.logprobs!.content!, r.choices[0]!.message.content!, 0);
      expect(r.choices[0]!.message.content).toBe(none.choices[0]!.message.content);
    }
  });

  const tools: ChatCompletionTool[] = [{ type: "function", function: { name: "run_tests", description: "Run the test suite", parameters: { type: "object", properties: {} } } }];

  const AGREEMENT_CASES = [
    ["the same greedy request", { temperature: 0 }],
    ["the same greedy request, tools in it (text held back)", { temperature: 0, tools }],
    ["the same seeded sampled request", { temperature: 1, seed: 7, max_tokens: 24 }],
  ] as const;

  for (const [name, over] of AGREEMENT_CASES) {
    it(`agrees streaming and non-streaming for ${name}`, async () => {
      const body = { model: MODEL, messages: short, max_tokens: 16, logprobs: true, top_logprobs: 3, ...over } as const;
      const greedy = body.temperature === 0;
      const whole = await client.chat.completions.create(body);
      const stream = await client.chat.completions.create({ ...body, stream: true });
      const streamed: ChatCompletionTokenLogprob[] = [];
      let text = "";
      let chunks = 0;
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        if (chunks++ === 0) expect(choice.logprobs ?? null).toBeNull(); // the role chunk
        else if (typeof choice.delta.content === "string") expect(choice.logprobs!.content).toBeInstanceOf(Array);
        if (choice.logprobs) {
          expect(choice.logprobs.refusal).toBeNull();
          streamed.push(...choice.logprobs.content!);
        }
        text += choice.delta.content ?? "";
      }
      expect(text).toBe(whole.choices[0]!.message.content ?? "");
      const expected = whole.choices[0]!.logprobs!.content!;
      expect(streamed.map((t) => [t.token, t.bytes])).toEqual(expected.map((t) => [t.token, t.bytes]));
      for (const [i, t] of streamed.entries()) {
        expect(t.logprob).toBeCloseTo(expected[i]!.logprob, 6);
        expect(t.top_logprobs.map((a) => a.token)).toEqual(expected[i]!.top_logprobs.map((a) => a.token));
      }
      if (!("tools" in body)) {
        checkLogprobs(streamed, text, 3, greedy);
        checkLogprobs(expected, whole.choices[0]!.message.content!, 3, greedy);
      }
    });
  }

  it("rejects bad values with 400 invalid_request naming top_logprobs or logprobs", async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ logprobs: true, top_logprobs: 21 }, "top_logprobs: must be an integer in [0, 20]"],
      [{ logprobs: true, top_logprobs: -1 }, "top_logprobs: must be an integer in [0, 20]"],
      [{ logprobs: true, top_logprobs: 2.5 }, "top_logprobs: must be an integer in [0, 20]"],
      [{ top_logprobs: 2 }, "top_logprobs: requires logprobs: true"],
      [{ logprobs: false, top_logprobs: 0 }, "top_logprobs: requires logprobs: true"],
      [{ logprobs: "yes" }, "logprobs: "],
    ];
    for (const [extra, message] of cases) {
      for (const path of ["/v1/chat/completions", "/v1/tenants/local/trajectories/lp-bad/turns"]) {
        const res = await fetch(`${stack.edgeUrl}${path}`, { method: "POST", headers: AUTH, body: JSON.stringify({ model: MODEL, messages: short, max_tokens: 2, ...extra }) });
        expect(res.status, `${path} ${JSON.stringify(extra)}`).toBe(400);
        const body = (await res.json()) as { error: { code: string; type: string; message: string } };
        expect(body.error.code).toBe("invalid_request");
        expect(body.error.type).toBe("invalid_request_error");
        expect(body.error.message.startsWith(message), body.error.message).toBe(true);
      }
    }
    // The client reports it the same way.
    await expect(client.chat.completions.create({ model: MODEL, messages: short, logprobs: true, top_logprobs: 30 })).rejects.toMatchObject({ status: 400, code: "invalid_request" });
  });

  it("keeps logprobs out of a trajectory's transcript: the next turns are deltas, a replay has none", async () => {
    const id = "lp-trajectory-1";
    const messages: ChatCompletionMessageParam[] = [
      { role: "system", content: `Logprob trajectory. ${"Be brief. ".repeat(12)}` },
      { role: "user", content: "Say something." },
    ];
    const first = await client.chat.completions.create(
      { model: MODEL, messages, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 },
      { headers: { "x-trajectory-id": id, "idempotency-key": "lp-1" } },
    );
    checkLogprobs(first.choices[0]!.logprobs!.content!, first.choices[0]!.message.content!, 2);
    messages.push({ role: "assistant", content: first.choices[0]!.message.content }, { role: "user", content: "More." });

    // A turn through the trajectory URL, with logprobs: a delta on the stored transcript.
    const res = await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}/turns`, {
      method: "POST",
      headers: AUTH,
      body: JSON.stringify({ messages: [messages.at(-1)], max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 1 }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-agent-edge-mode")).toBe("delta");
    const second = (await res.json()) as OpenAI.ChatCompletion;
    checkLogprobs(second.choices[0]!.logprobs!.content!, second.choices[0]!.message.content!, 1);
    messages.push({ role: "assistant", content: second.choices[0]!.message.content }, { role: "user", content: "Again." });

    // The full transcript as the client holds it extends what was stored: still a delta.
    const raw = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, temperature: 0 }, { headers: { "x-trajectory-id": id } }).withResponse();
    expect(raw.response.headers.get("x-agent-edge-mode")).toBe("delta");
    expect(raw.data.choices[0]!.logprobs).toBeNull();

    const state = (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: AUTH })).json()) as { message_count: number; turns: { mode: string }[] };
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta", "delta"]);
    expect(state.message_count).toBe(messages.length + 1);

    // A replay of the first turn: the stored answer, whose logprobs were never stored.
    const replay = await client.chat.completions
      .create({ model: MODEL, messages: messages.slice(0, 2), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 2 }, { headers: { "x-trajectory-id": id, "idempotency-key": "lp-1" } })
      .withResponse();
    expect(replay.response.headers.get("x-agent-edge-replayed")).toBe("true");
    expect(replay.data.choices[0]!.message.content).toBe(first.choices[0]!.message.content);
    expect(replay.data.choices[0]!.logprobs).toEqual({ content: [], refusal: null });
  });
});
