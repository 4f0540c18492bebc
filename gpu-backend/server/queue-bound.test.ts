import { describe, expect, it } from "vitest";
import { encode, FrameDecoder } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type Frame, type GenerateRequest } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { testApp, TEST_SECRET } from "./testing/test-app";
import { createBackendApp } from "./app";

/**
 * The queue bound through the real app and engine (tiny model): a turn arriving while another's
 * prompt is still queued past the bound gets HTTP 429 with an `overloaded` frame, nothing of it
 * is kept (the frame says when to retry: `retryAfterS`), and the backend serves the next turn once
 * the queue drained.
 */
// Small steps: the first turn's prompt stays queued over many steps.
const t = testApp("queue-bound", (engine) => createBackendApp({ engine, secret: TEST_SECRET, backendId: "t" }), { scheduler: { maxBatchTokens: 16, maxQueuedTokens: 100 } });
const SECRET = TEST_SECRET;

const request = (text: string): GenerateRequest => ({
  requestId: crypto.randomUUID(),
  mode: "full",
  messages: [{ role: "user", content: text }],
  sampling: { maxTokens: 3, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true },
});

async function generate(req: GenerateRequest): Promise<{ status: number; frames: Frame[] }> {
  const res = await t.app.request(ROUTES.backend.generate, { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET }, body: encode(req) });
  return { status: res.status, frames: new FrameDecoder().push(new Uint8Array(await res.arrayBuffer())) };
}

describe("backend queue bound (--max-queued-tokens)", () => {
  it("answers 429 overloaded to a turn that would pass the bound, keeps nothing of it, and serves once the queue drained", async () => {
    const long = "word ".repeat(80);
    // A turn first, so that the backend has measured its prefill rate (16-token steps).
    expect((await generate(request("warm up ".repeat(20)))).status).toBe(200);
    expect(t.engine.prefillRate.tokensPerS).toBeGreaterThan(0);
    // Both arrive together; whichever the engine takes first runs, the other is refused.
    const answers = await Promise.all([generate(request(long)), generate(request(`other ${long}`))]);
    const first = answers.find((a) => a.status === 200) ?? answers[0]!;
    const second = answers.find((a) => a !== first)!;
    expect(first.status).toBe(200);
    expect(first.frames.at(-1)?.type).toBe("done");
    expect(second.status).toBe(429);
    expect(second.frames).toHaveLength(1);
    expect(second.frames[0]).toMatchObject({ type: "error", code: "overloaded", retryable: true });
    expect((second.frames[0] as { message: string }).message).toMatch(/prompt tokens queued; \d+ more would pass its bound of 100/);
    // When to retry: the queue's drain time at the measured rate, whole seconds in 1..60.
    const { retryAfterS } = second.frames[0] as { retryAfterS?: number };
    expect(Number.isInteger(retryAfterS) && retryAfterS! >= 1 && retryAfterS! <= 60).toBe(true);
    expect(t.engine.scheduler.refused).toBe(1);
    expect(t.engine.numRunning + t.engine.numWaiting).toBe(0);
    expect(t.engine.scheduler.queuedTokens()).toBe(0);

    const again = await generate(request(`other ${long}`));
    expect(again.status).toBe(200);
    expect(again.frames.at(-1)?.type).toBe("done");
    const metrics = await (await t.app.request(ROUTES.backend.metrics, { headers: { [SECRET_HEADER]: SECRET } })).text();
    expect(metrics).toMatch(/^agent_edge_overloaded_total 1$/m);
    expect(metrics).toMatch(/^agent_edge_queued_tokens 0$/m);
    expect(Number(/^agent_edge_prefill_tokens_per_second (\S+)$/m.exec(metrics)?.[1])).toBe(t.engine.prefillRate.tokensPerS);
  });
});
