import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Ajv2020 } from "ajv/dist/2020";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { DoneFrame, Frame, GenerateRequest, SamplingParams, ToolDefinition } from "../../protocol/messages";
import { SECRET_HEADER } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import type { CpuExecutor } from "../model/executors/cpu-executor";
import { tinyModelDir } from "../model/testing/tiny-model";
import { testEngine } from "./testing/test-engine";
import { createBackendApp } from "./app";
import { DEFAULT_DEMO_AGENT_TOKENS, demoConstraint, endOfTurnTokenId, VISIBLE_TEXT } from "../engine/demo-agent";
import type { Engine } from "../engine/engine";

/**
 * Demo agent mode (`--demo-agent`) on the tiny random model (Qwen3's template): a user's turn
 * with tools is one valid tool call, a tool result's turn is text ended by the end-of-turn token
 * at N tokens, whose ids the next delta turn reuses; off by default.
 */
const N = DEFAULT_DEMO_AGENT_TOKENS;
let dir: string;
const executors: CpuExecutor[] = [];
let demo: Engine;
let plain: Engine;

/** Claude Code-like tools, as zod 4 writes them (2020-12). */
const zodTools = {
  Bash: z.object({ command: z.string(), timeout: z.number().max(600_000).optional() }),
  Read: z.object({ file_path: z.string(), limit: z.number().int().optional() }),
};
const tools: ToolDefinition[] = Object.entries(zodTools).map(([name, schema]) => ({ type: "function", function: { name, description: `the ${name} tool`, parameters: z.toJSONSchema(schema) as Record<string, unknown> } }));

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "agent-edge-demo-agent-"));
  const modelDir = await tinyModelDir(dir);
  const a = await testEngine({ modelDir, demoAgent: { replyTokens: N } });
  const b = await testEngine({ modelDir });
  executors.push(a.executor, b.executor);
  [demo, plain] = [a.engine, b.engine];
});

afterAll(async () => {
  for (const e of executors) await e.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const sampling = (over: Partial<SamplingParams> = {}): SamplingParams => ({ temperature: 1, topP: 1, topK: 0, seed: 1, stop: [], stopTokenIds: [], ...over });
const userTurn = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: crypto.randomUUID(),
  trajectoryId: "t1",
  mode: "full",
  messages: [{ role: "system", content: "You are a coding agent." }, { role: "user", content: "List the files." }],
  tools,
  constraint: { type: "tool_calls", choice: "auto", parallel: true }, // what the edge sends for tools without tool_choice
  sampling: sampling(),
  ...over,
});

function turn(engine: Engine, req: GenerateRequest): Promise<DoneFrame> {
  return new Promise((resolve, reject) =>
    engine.submit(req, (f: Frame) => {
      if (f.type === "done") resolve(f);
      else if (f.type === "error") reject(new Error(`${f.code}: ${f.message}`));
    }),
  );
}

describe("demo agent mode", () => {
  it("answers a user's turn with tools with exactly one tool call whose arguments validate, within N tokens", async () => {
    const done = await turn(demo, userTurn());
    expect(done.finishReason).toBe("stop"); // the edge reports tool_calls
    expect(done.usage.completionTokens).toBeLessThanOrEqual(N);
    const calls = done.message.tool_calls ?? [];
    expect(calls).toHaveLength(1);
    const call = calls[0]!;
    const schema = tools.find((t) => t.function.name === call.function.name)!.function.parameters!;
    const ajv = new Ajv2020({ strict: false });
    expect(ajv.validate(schema, JSON.parse(call.function.arguments)), ajv.errorsText()).toBe(true);
    // Greedy whatever the request's temperature: the same turn gives the same call.
    const again = await turn(demo, userTurn({ trajectoryId: "t2", sampling: sampling({ seed: 99 }) }));
    expect(again.text).toBe(done.text);
  });

  it("answers a tool result's turn with visible words ended by the end-of-turn token (finish stop), and the next delta turn reuses every token", async () => {
    const first = await turn(demo, userTurn({ trajectoryId: "t3" }));
    const call = first.message.tool_calls![0]!;
    const reply = await turn(demo, { ...userTurn({ trajectoryId: "t3" }), mode: "delta", stateId: first.stateId, tools: undefined, messages: [{ role: "tool", tool_call_id: call.id, content: "README.md\nsrc" }] });
    expect(reply.finishReason).toBe("stop");
    const used = reply.usage.completionTokens;
    expect(used).toBeLessThanOrEqual(N);
    expect(reply.message.tool_calls).toBeUndefined();
    expect(reply.message.content).toMatch(/^"[A-Za-z][A-Za-z ]*"$/);
    const kept = demo.states.get(reply.stateId)!;
    const eot = endOfTurnTokenId(demo.options.codec)!;
    expect(demo.options.codec.decode([eot])).toBe("<|im_end|>");
    expect(kept.generatedTokenIds).toHaveLength(used);
    // The words' grammar completed (a closing quote): the reply ended there, as a finished call does.
    expect(demo.options.codec.decode(kept.generatedTokenIds.slice(-1))).toBe('"');
    expect(reply.text).not.toContain("<|im_end|>");

    const next = await turn(demo, { ...userTurn({ trajectoryId: "t3" }), mode: "delta", stateId: reply.stateId, tools: undefined, messages: [{ role: "user", content: "Thanks." }] });
    const nextState = demo.states.get(next.stateId)!;
    expect(nextState.promptTokenIds.slice(0, reply.usage.promptTokens + used)).toEqual([...kept.promptTokenIds, ...kept.generatedTokenIds]);
    // Everything but the reply's last token, whose KV no turn computes before the next one.
    expect(next.usage.cachedTokens).toBe(reply.usage.promptTokens + used - 1);
    expect(next.message.tool_calls).toHaveLength(1); // the user's turn again: a call
  });

  it("keeps a client's own constraint and a smaller budget, and caps a larger one", async () => {
    const none = await turn(demo, userTurn({ trajectoryId: "t4", constraint: { type: "tool_calls", choice: "none", parallel: true } }));
    expect(none.message.tool_calls).toBeUndefined();
    expect([none.finishReason, none.usage.completionTokens]).toEqual(["stop", N]);
    // Free text (the client's "none") reaching N ends with the end-of-turn token, kept as a sampled one would be.
    expect(demo.states.get(none.stateId)!.generatedTokenIds.at(-1)).toBe(endOfTurnTokenId(demo.options.codec));
    const small = await turn(demo, userTurn({ trajectoryId: "t5", tools: undefined, constraint: undefined, sampling: sampling({ maxTokens: 5 }) }));
    expect(small.usage.completionTokens).toBeLessThanOrEqual(5); // the words close within a smaller budget
    const large = await turn(demo, userTurn({ trajectoryId: "t6", tools: undefined, constraint: undefined, sampling: sampling({ maxTokens: 500 }) }));
    expect(large.finishReason).toBe("stop");
    expect(large.usage.completionTokens).toBeLessThanOrEqual(N);
    expect(large.message.content).toMatch(/^"[A-Za-z][A-Za-z ]*"$/);
  });

  it("is off by default: a user's turn with tools is free text up to its budget", async () => {
    const done = await turn(plain, userTurn({ sampling: sampling({ temperature: 0, maxTokens: N + 12 }) }));
    expect([done.finishReason, done.usage.completionTokens]).toEqual(["length", N + 12]);
    expect(done.message.tool_calls).toBeUndefined();
    const app = createBackendApp({ engine: plain, secret: "s", backendId: "t" });
    expect(await (await app.request(ROUTES.backend.healthz)).json()).not.toHaveProperty("demo_agent");
  });

  it("reports itself in /healthz and /v1/models", async () => {
    const app = createBackendApp({ engine: demo, secret: "s", backendId: "t" });
    expect(await (await app.request(ROUTES.backend.healthz)).json()).toMatchObject({ demo_agent: N });
    const models = (await (await app.request(ROUTES.backend.models, { headers: { [SECRET_HEADER]: "s" } })).json()) as { data: Record<string, unknown>[] };
    expect(models.data[0]).toMatchObject({ demo_agent: N, max_output_tokens: N, context_length: demo.contextTokens });
  });
});

describe("demoConstraint", () => {
  const user = [{ role: "user" as const, content: "hi" }];
  it("asks for one call only on a user's turn with tools and no constraint of the client's", () => {
    const one = { type: "tool_calls", choice: "required", parallel: false };
    expect(demoConstraint(undefined, tools, user, true)).toEqual(one);
    expect(demoConstraint({ type: "tool_calls", choice: "auto", parallel: true }, tools, user, true)).toEqual(one);
    // Claude Code puts a system message after the user's: still the user's turn.
    expect(demoConstraint(undefined, tools, [...user, { role: "system", content: "env" }], true)).toEqual(one);
    // Any other free turn is visible words.
    expect(demoConstraint(undefined, [], user, true)).toBe(VISIBLE_TEXT);
    expect(demoConstraint(undefined, tools, user, false)).toBe(VISIBLE_TEXT); // pythonic calls (Gemma 3) cannot be constrained
    expect(demoConstraint(undefined, tools, [...user, { role: "tool", content: "x", tool_call_id: "c" }], true)).toBe(VISIBLE_TEXT);
    const answer = { type: "tool_calls", choice: "auto", parallel: true, answer: { type: "json_object" } } as const;
    expect(demoConstraint(answer, tools, user, true)).toBe(answer);
    expect(demoConstraint({ type: "json_object" }, tools, user, true)).toEqual({ type: "json_object" });
  });
});
