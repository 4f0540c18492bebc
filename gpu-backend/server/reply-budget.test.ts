import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encode, FrameDecoder } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type DoneFrame, type ErrorFrame, type Frame, type GenerateRequest, type SamplingParams } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { CpuExecutor } from "../model/executors/cpu-executor";
import { tinyModelDir } from "../model/testing/tiny-model";
import { testEngine } from "./testing/test-engine";
import { createBackendApp } from "./app";
import { replyBudget } from "../engine/reply-budget";

/**
 * Output budgets through the real app and engine (tiny model, a 64-token context): no
 * `maxTokens` runs to the context's end, a larger one is clamped there, both finishing `length`;
 * a prompt that leaves no room is 400 `context_length_exceeded`.
 */
const SECRET = "s3cret";
const CONTEXT = 64;
let dir: string;
let executor: CpuExecutor;
let app: ReturnType<typeof createBackendApp>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-reply-budget-"));
  const made = await testEngine({ modelDir: await tinyModelDir(dir), maxContext: CONTEXT });
  executor = made.executor;
  app = createBackendApp({ engine: made.engine, secret: SECRET, backendId: "t" });
});

afterAll(async () => {
  await executor?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const sampling = (over: Partial<SamplingParams> = {}): SamplingParams => ({ temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true, ...over });
const request = (content: string, s: SamplingParams): GenerateRequest => ({ requestId: crypto.randomUUID(), mode: "full", messages: [{ role: "user", content }], sampling: s });

async function generate(req: GenerateRequest): Promise<{ status: number; last: Frame }> {
  const res = await app.request(ROUTES.backend.generate, { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET }, body: encode(req) });
  return { status: res.status, last: new FrameDecoder().push(new Uint8Array(await res.arrayBuffer())).at(-1)! };
}

describe("reply budgets", () => {
  it("without maxTokens, a reply runs to the context's end and finishes with length", async () => {
    const { status, last } = await generate(request("hi", sampling()));
    expect(status).toBe(200);
    const done = last as DoneFrame;
    expect(done.finishReason).toBe("length");
    expect(done.usage.promptTokens + done.usage.completionTokens).toBe(CONTEXT);
  });

  it("clamps a budget larger than what the context leaves (finish length), and keeps a smaller one", async () => {
    const huge = (await generate(request("hello there", sampling({ maxTokens: 1_000_000 })))).last as DoneFrame;
    expect(huge.finishReason).toBe("length");
    expect(huge.usage.promptTokens + huge.usage.completionTokens).toBe(CONTEXT);
    const small = (await generate(request("hello there", sampling({ maxTokens: 5 })))).last as DoneFrame;
    expect([small.finishReason, small.usage.completionTokens]).toEqual(["length", 5]);
  });

  it("refuses a prompt that leaves no room for one token: 400 context_length_exceeded", async () => {
    const { status, last } = await generate(request("word ".repeat(CONTEXT), sampling()));
    expect(status).toBe(400);
    expect((last as ErrorFrame).code).toBe("context_length_exceeded");
    expect((last as ErrorFrame).message).toMatch(/leaves no room for a reply in the model's context of 64 tokens/);
  });

  it("reports the context and the longest reply in GET /v1/models", async () => {
    const body = (await (await app.request(ROUTES.backend.models, { headers: { [SECRET_HEADER]: SECRET } })).json()) as { data: Record<string, unknown>[] };
    expect(body.data[0]).toMatchObject({ context_length: CONTEXT, max_output_tokens: CONTEXT });
    expect(body.data[0]).not.toHaveProperty("demo_agent");
  });
});

describe("replyBudget", () => {
  it("is what the context leaves, the asked budget when smaller, the cap when smaller still", () => {
    expect(replyBudget(sampling(), 10, 64)).toMatchObject({ sampling: { maxTokens: 54 }, capped: false });
    expect(replyBudget(sampling({ maxTokens: 100 }), 10, 64)).toMatchObject({ sampling: { maxTokens: 54 }, capped: false });
    expect(replyBudget(sampling({ maxTokens: 20 }), 10, 64, 48)).toMatchObject({ sampling: { maxTokens: 20 }, capped: false });
    expect(replyBudget(sampling(), 10, 64, 48)).toMatchObject({ sampling: { maxTokens: 48 }, capped: true });
    expect(replyBudget(sampling(), 30, 64, 48)).toMatchObject({ sampling: { maxTokens: 34 }, capped: false });
    expect(replyBudget(sampling(), 63, 64).sampling.maxTokens).toBe(1);
    expect(() => replyBudget(sampling(), 64, 64)).toThrow(/leaves no room/);
  });
});
