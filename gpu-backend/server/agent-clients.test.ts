import { Ajv2020 } from "ajv/dist/2020";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { decodeTokenizeResponse, encode, FrameDecoder } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type DoneFrame, type ErrorFrame, type Frame, type GenerateRequest, type ReplyConstraint, type ToolDefinition } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";
import { testApp, TEST_SECRET } from "./testing/test-app";
import { createBackendApp } from "./app";

/**
 * What real coding CLIs (Claude Code, Codex, OpenCode, Qwen Code) send, through the real app and
 * engine (tiny model): tool schemas in every JSON Schema dialect, broken ones (400 naming the
 * tool, never a 5xx), model names the backend does not serve, the thinking switch.
 */
const t = testApp("agent-clients", (engine) => createBackendApp({ engine, secret: TEST_SECRET, backendId: "t" }));
const SECRET = TEST_SECRET;

const tool = (name: string, parameters: Record<string, unknown>, strict = false): ToolDefinition => ({ type: "function", function: { name, description: name, parameters, ...(strict ? { strict } : {}) } });

/** One tool per dialect: zod 4 (2020-12, as Claude Code's tools), 2019-09, draft-07, none. */
const TOOLS: ToolDefinition[] = [
  tool("Bash", z.toJSONSchema(z.object({ command: z.string(), timeout: z.number().max(600_000).optional() })) as Record<string, unknown>),
  tool("Glob", { $schema: "https://json-schema.org/draft/2019-09/schema", type: "object", $defs: { p: { type: "string" } }, properties: { pattern: { $ref: "#/$defs/p" } }, required: ["pattern"] }),
  tool("Read", { $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { file_path: { type: "string" } }, required: ["file_path"], additionalProperties: false }),
  tool("Ls", { type: "object", properties: { path: { type: "string" } }, required: ["path"] }),
];
/** Not a JSON Schema (ajv refuses it). */
const BROKEN = tool("Broken", { $schema: "https://json-schema.org/draft/2020-12/schema", type: "object", properties: { x: { type: "strnig" } } });
/** A JSON Schema ajv takes and xgrammar cannot compile (its regex converter has no lookahead). */
const LOOKAHEAD = tool("Grep", { $schema: "https://json-schema.org/draft/2020-12/schema", type: "object", properties: { pattern: { type: "string", pattern: "^(?=a)\\w+$" } }, required: ["pattern"] });

const request = (tools: ToolDefinition[], constraint: ReplyConstraint | undefined, over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  requestId: crypto.randomUUID(),
  mode: "full",
  messages: [{ role: "user", content: "Run the tests." }],
  tools,
  ...(constraint ? { constraint } : {}),
  sampling: { maxTokens: 64, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [] },
  ...over,
});
const required = { type: "tool_calls", choice: "required", parallel: false } as const;
const auto = { type: "tool_calls", choice: "auto", parallel: true } as const;

async function generate(req: GenerateRequest): Promise<{ status: number; last: Frame }> {
  const res = await t.app.request(ROUTES.backend.generate, { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET }, body: encode(req) });
  return { status: res.status, last: new FrameDecoder().push(new Uint8Array(await res.arrayBuffer())).at(-1)! };
}

describe("tool schemas from agent CLIs", () => {
  it("constrains calls over tools in every dialect: 2020-12 (zod 4), 2019-09, draft-07, none", async () => {
    for (const [i, t] of TOOLS.entries()) {
      const { status, last } = await generate(request(TOOLS, { type: "tool_calls", choice: { name: t.function.name }, parallel: false }));
      expect(status, `${i}: ${JSON.stringify(last)}`).toBe(200);
      const call = (last as DoneFrame).message.tool_calls![0]!;
      expect(call.function.name).toBe(t.function.name);
      const ajv = new Ajv2020({ strict: false });
      const { $schema: _, ...schema } = t.function.parameters!;
      expect(ajv.validate(schema, JSON.parse(call.function.arguments)), ajv.errorsText()).toBe(true);
    }
    expect((await generate(request(TOOLS, auto))).status).toBe(200);
  });

  it("answers 400 invalid_schema naming the tool when a constraint needs a schema ajv or xgrammar cannot compile", async () => {
    for (const [bad, pattern] of [
      [BROKEN, /^tools\[4\] \(Broken\): not a valid JSON Schema \(2020-12\)/],
      [LOOKAHEAD, /^tools\[4\] \(Grep\): the grammar engine cannot compile this schema/],
    ] as const) {
      for (const constraint of [required, { type: "tool_calls", choice: { name: bad.function.name }, parallel: false } as const]) {
        const { status, last } = await generate(request([...TOOLS, bad], constraint));
        expect(status).toBe(400);
        expect((last as ErrorFrame).code).toBe("invalid_schema");
        expect((last as ErrorFrame).message).toMatch(pattern);
      }
      // Under auto, a strict tool's schema must hold too.
      const strict = { ...bad, function: { ...bad.function, strict: true } };
      expect(((await generate(request([...TOOLS, strict], auto))).last as ErrorFrame).message).toMatch(pattern);
    }
  });

  it("fails no turn over a schema no constraint enforces: no constraint, or auto with non-strict tools", async () => {
    for (const constraint of [undefined, auto]) {
      const { status, last } = await generate(request([...TOOLS, BROKEN, LOOKAHEAD], constraint));
      expect(status, JSON.stringify(last)).toBe(200);
      expect(last.type).toBe("done");
    }
  });
});

describe("requests agent CLIs make", () => {
  it("answers a model name it does not serve (claude-sonnet-4-5) with 404 unknown_model", async () => {
    const { status, last } = await generate(request([], undefined, { model: "claude-sonnet-4-5" }));
    expect(status).toBe(404);
    expect(last).toMatchObject({ type: "error", code: "unknown_model", retryable: false });
    expect((last as ErrorFrame).message).toMatch(/"claude-sonnet-4-5" is not served here/);
  });

  it("renders the template with enable_thinking when the request sets thinking (Qwen3: false adds an empty think block)", async () => {
    const messages = [{ role: "user" as const, content: "hi" }];
    const count = async (thinking?: boolean) => {
      const res = await t.app.request(ROUTES.backend.tokenize, { method: "POST", headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: SECRET }, body: encode({ messages, ...(thinking === undefined ? {} : { thinking }) }) });
      const decoded = decodeTokenizeResponse(new Uint8Array(await res.arrayBuffer()));
      if (!decoded.ok) throw decoded.error;
      return decoded.value.promptTokens;
    };
    const { codec } = t.engine.options;
    const think = codec.encode("<think>\n\n</think>\n\n").length;
    expect(await count(false)).toBe((await count()) + think);
    expect(await count(true)).toBe(await count());
    const off = (await generate(request([], undefined, { messages, thinking: false, trajectoryId: "think-off" }))).last as DoneFrame;
    expect(t.engine.states.get(off.stateId)!.promptText.endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n")).toBe(true);
    expect(off.usage.promptTokens).toBe(await count(false));
    const on = (await generate(request([], undefined, { messages, thinking: true }))).last as DoneFrame;
    expect(t.engine.states.get(on.stateId)!.promptText.endsWith("<|im_start|>assistant\n")).toBe(true);
  });
});
