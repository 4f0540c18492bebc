import { Ajv } from "ajv";
import OpenAI, { APIError } from "openai";
import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Stack } from "../scripts/stack";
import { AIRLINE_TOOLS } from "./support/airline-tools";
import { startTestStack, type TestStack } from "./support/stack-fixture";

/**
 * Structured outputs end to end: a real backend process and `wrangler dev`, driven by the official
 * `openai` client. The tiny random model never writes a tool call or closes a string by itself;
 * every valid structure here is constrained decoding's doing. Arguments and responses are checked
 * with ajv against the very schemas sent.
 */
const MODEL = "tiny-llama-random";
const ajv = new Ajv({ strict: false });

/** Three of the airline tools: nested objects, enums, arrays, required fields, numbers with ranges. */
const TOOLS = AIRLINE_TOOLS.filter((t) => ["search_flights", "book_seats", "set_budget"].includes(t.function.name));

const schemaOf = (name: string) => TOOLS.find((t) => t.function.name === name)!.function.parameters!;
const messages: ChatCompletionMessageParam[] = [
  { role: "system", content: "You are a travel agent. Use the tools to search, budget and book flights for the user. Always call a tool." },
  { role: "user", content: "Find me a flight from Paris to Lisbon next Friday for two adults, economy." },
];

type Call = { type?: string; function?: { name: string; arguments: string } };

/** Function calls only (the client's type also allows custom tool calls, which never come here). */
function functionCalls(calls: Call[] | undefined): { function: { name: string; arguments: string } }[] {
  return (calls ?? []).map((c) => ({ function: c.function! }));
}

function checkCalls(raw: Call[] | undefined, context = ""): void {
  const calls = functionCalls(raw);
  expect(calls.length, context).toBeGreaterThan(0);
  for (const call of calls) {
    const args: unknown = JSON.parse(call.function.arguments);
    expect(ajv.validate(schemaOf(call.function.name), args), `${call.function.name} ${call.function.arguments}: ${ajv.errorsText()}`).toBe(true);
  }
}

describe("structured outputs end to end (wrangler dev + backend + openai client)", () => {
  let fixture: TestStack | undefined;
  let stack: Stack;
  let client: OpenAI;

  beforeAll(async () => {
    fixture = await startTestStack({ name: "structured", kvMemory: "64MiB", threads: 1, devtools: false });
    ({ stack } = fixture);
    client = new OpenAI({ apiKey: "sk-local-dev", baseURL: `${stack.edgeUrl}/v1`, maxRetries: 0 });
  });

  afterAll(() => fixture?.stop());

  it("200 calls with tool_choice required all return schema-valid arguments", async () => {
    const CALLS = 200;
    /** Budgets from just above the longest call's shortest form to twice that: the random model fills every one. */
    const budget = (i: number) => 64 + (i % 4) * 24;
    const CONCURRENT = 8;
    let next = 0;
    const finishReasons = new Map<string, number>();
    const names = new Set<string>();
    const worker = async () => {
      while (next < CALLS) {
        const i = next++;
        const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: "required", parallel_tool_calls: i % 3 === 0, max_tokens: budget(i), temperature: 1, seed: i });
        const choice = r.choices[0]!;
        finishReasons.set(choice.finish_reason, (finishReasons.get(choice.finish_reason) ?? 0) + 1);
        checkCalls(choice.message.tool_calls, `seed ${i}: ${choice.finish_reason} ${JSON.stringify(choice.message.content)}`);
        for (const c of functionCalls(choice.message.tool_calls)) names.add(c.function.name);
        expect(r.usage!.completion_tokens).toBeLessThanOrEqual(budget(i));
      }
    };
    await Promise.all(Array.from({ length: CONCURRENT }, worker));
    expect(Object.fromEntries(finishReasons)).toEqual({ tool_calls: CALLS });
    expect(names.size).toBe(TOOLS.length); // every tool gets chosen at some point
  }, 600_000);

  it("a forced named tool is the only tool called", async () => {
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: { type: "function", function: { name: "book_seats" } }, max_tokens: 80, seed });
      checkCalls(r.choices[0]!.message.tool_calls);
      expect(functionCalls(r.choices[0]!.message.tool_calls).map((c) => c.function.name)).toEqual(["book_seats"]);
      expect(r.choices[0]!.finish_reason).toBe("tool_calls");
    }
  }, 120_000);

  it("json_schema and json_object responses are valid JSON, streaming deltas included", async () => {
    const schema = schemaOf("search_flights");
    for (const max_tokens of [200, 40]) {
      const r = await client.chat.completions.create({ model: MODEL, messages, max_tokens, seed: max_tokens, response_format: { type: "json_schema", json_schema: { name: "flight", schema, strict: true } } });
      expect(ajv.validate(schema, JSON.parse(r.choices[0]!.message.content!)), r.choices[0]!.message.content!).toBe(true);
      expect(r.choices[0]!.finish_reason).toBe("stop");
    }
    const o = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 40, seed: 5, response_format: { type: "json_object" } });
    const parsed: unknown = JSON.parse(o.choices[0]!.message.content!);
    expect(typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)).toBe(true);

    const stream = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 60, seed: 9, stream: true, response_format: { type: "json_schema", json_schema: { name: "flight", schema, strict: true } } });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(ajv.validate(schema, JSON.parse(text)), text).toBe(true);
    expect(finish).toBe("stop");
  }, 120_000);

  it("a JSON response_format next to callable tools: each reply is one valid call or the valid JSON answer", async () => {
    const answer = { type: "object", properties: { summary: { type: "string" }, seats: { type: "integer", minimum: 1, maximum: 9 } }, required: ["summary", "seats"], additionalProperties: false };
    const seen = { calls: 0, answers: 0 };
    for (let seed = 1; seed <= 8; seed++) {
      const response_format = seed % 4 === 0 ? ({ type: "json_object" } as const) : ({ type: "json_schema", json_schema: { name: "answer", schema: answer, strict: true } } as const);
      const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, response_format, max_tokens: 100, temperature: 1, seed });
      const choice = r.choices[0]!;
      const context = `seed ${seed}: ${choice.finish_reason} ${JSON.stringify(choice.message)}`;
      if (choice.message.tool_calls?.length) {
        checkCalls(choice.message.tool_calls, context);
        expect(choice.message.tool_calls.length, context).toBe(1);
        expect(choice.finish_reason, context).toBe("tool_calls");
        seen.calls++;
        continue;
      }
      const value: unknown = JSON.parse(choice.message.content!);
      if (response_format.type === "json_schema") expect(ajv.validate(answer, value), `${context}: ${ajv.errorsText()}`).toBe(true);
      else expect(typeof value === "object" && value !== null && !Array.isArray(value), context).toBe(true);
      expect(choice.finish_reason, context).toBe("stop");
      seen.answers++;
    }
    // Seeded sampling is deterministic here: these seeds take both branches.
    expect(seen.calls).toBeGreaterThan(0);
    expect(seen.answers).toBeGreaterThan(0);
    // Under "required" a call is all the reply may be: the response_format is moot.
    const forced = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: "required", response_format: { type: "json_object" }, max_tokens: 100, seed: 1 });
    checkCalls(forced.choices[0]!.message.tool_calls);
  }, 180_000);

  it("streamed tool-call deltas reassemble to valid arguments", async () => {
    const stream = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: "required", max_tokens: 80, seed: 11, stream: true });
    const calls = new Map<number, { name: string; arguments: string }>();
    let finish: string | null = null;
    for await (const chunk of stream) {
      for (const d of chunk.choices[0]?.delta.tool_calls ?? []) {
        const call = calls.get(d.index) ?? { name: "", arguments: "" };
        call.name += d.function?.name ?? "";
        call.arguments += d.function?.arguments ?? "";
        calls.set(d.index, call);
      }
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    checkCalls([...calls.values()].map((c) => ({ function: c })));
    expect(finish).toBe("tool_calls");
  }, 120_000);

  it("constrained greedy answers are the same with the prompt cached and uncached", async () => {
    const body = { model: MODEL, messages, tools: TOOLS, tool_choice: "required" as const, max_tokens: 64, temperature: 0 };
    const first = await client.chat.completions.create(body);
    const second = await client.chat.completions.create(body);
    expect(second.usage!.prompt_tokens_details!.cached_tokens).toBeGreaterThan(0);
    const calls = (r: typeof first) => functionCalls(r.choices[0]!.message.tool_calls).map((c) => [c.function.name, c.function.arguments]);
    expect(calls(first).length).toBeGreaterThan(0);
    expect(calls(second)).toEqual(calls(first));
  }, 120_000);

  it("tool_choice none never returns tool calls", async () => {
    const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, tool_choice: "none", max_tokens: 16, seed: 3 });
    expect(r.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(r.choices[0]!.finish_reason).not.toBe("tool_calls");
  });

  it("answers bad constraints with 400 and a stable code, storing nothing", async () => {
    const trajectory = "so-errors";
    const headers = { "x-trajectory-id": trajectory };
    const ok = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 4, seed: 1 }, { headers });
    const stored = async () =>
      ((await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${trajectory}`, { headers: { authorization: "Bearer sk-local-dev" } })).json()) as { message_count: number }).message_count;
    const before = await stored();
    const next = [...messages, ok.choices[0]!.message as ChatCompletionMessageParam, { role: "user" as const, content: "And back?" }];
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ tools: TOOLS, tool_choice: { type: "function", function: { name: "cancel_everything" } } }, "unknown_tool", /cancel_everything/],
      [{ tool_choice: "required" }, "unknown_tool", /no tools/],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "strnig" }, strict: true } } }, "invalid_schema", /not a valid JSON Schema/],
      [{ response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "integer", multipleOf: 3 }, strict: true } } }, "unsupported_schema", /"multipleOf"/],
      [{ tools: [{ type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { a: { not: { type: "string" } } } } } }], tool_choice: "required" }, "unsupported_schema", /"not" at #\/properties\/a/],
      [{ response_format: { type: "json_schema", json_schema: { name: "flight", schema: schemaOf("search_flights"), strict: true } }, max_tokens: 5 }, "max_tokens_too_small", /too small/],
    ];
    for (const [extra, code, message] of cases) {
      const error = await client.chat.completions.create({ model: MODEL, messages: next, max_tokens: 32, ...extra } as never, { headers }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error, JSON.stringify(extra)).toBeInstanceOf(APIError);
      expect((error as APIError).status).toBe(400);
      expect((error as APIError).code).toBe(code);
      expect((error as APIError).message).toMatch(message);
    }
    expect(await stored()).toBe(before);
    // A strict-less schema with the same keyword is best effort: the keyword is dropped, the rest enforced.
    const loose = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 24, seed: 2, response_format: { type: "json_schema", json_schema: { name: "n", schema: { type: "object", properties: { n: { type: "integer", multipleOf: 3 } }, required: ["n"] } } } });
    expect(Number.isInteger((JSON.parse(loose.choices[0]!.message.content!) as { n: number }).n)).toBe(true);
  }, 120_000);
});
