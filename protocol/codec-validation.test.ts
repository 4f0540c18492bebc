import { describe, expect, it } from "vitest";
import { decodeFrame, decodeGenerateRequest, decodeReleaseStateRequest, decodeTokenizeRequest, decodeTokenizeResponse, encode, validateHeartbeat, type DecodeResult } from "./codec";
import type { GenerateRequest } from "./messages";
import { clone, concatBytes, DONE, DONE_TOOL_CALL, ERROR, expectError, expectOk, fromHex, GOLDEN_REQUEST, REQUEST, TOKEN, TOKEN_LOGPROBS, utf8 } from "./codec-fixtures";

// ---------------------------------------------------------------------------------------------
// Validation: code invalid_request, message names the field path
// ---------------------------------------------------------------------------------------------

type Mutation = [string, (r: Record<string, any>) => void];

const ROLE_LIST = '"system", "user", "assistant", "tool"';
const REQUEST_FAILURES: Mutation[] = [
  ["requestId is required", (r) => delete r.requestId],
  ["requestId must be a non-empty string", (r) => (r.requestId = "")],
  ["requestId must be a non-empty string", (r) => (r.requestId = 7)],
  ["model must be a string", (r) => (r.model = null)],
  ["trajectoryId must be a string", (r) => (r.trajectoryId = 1)],
  ["cacheSalt must be a string", (r) => (r.cacheSalt = true)],
  ["mode is required", (r) => delete r.mode],
  ['mode must be one of "full", "delta"', (r) => (r.mode = "partial")],
  ["messages is required", (r) => delete r.messages],
  ["messages must be an array", (r) => (r.messages = { role: "user" })],
  ["messages must be a non-empty array", (r) => (r.messages = [])],
  ["messages[1] must be a map", (r) => (r.messages[1] = "Hi")],
  ["messages[1].role is required", (r) => delete r.messages[1].role],
  [`messages[1].role must be one of ${ROLE_LIST}`, (r) => (r.messages[1].role = "robot")],
  ["messages[0].content is required", (r) => delete r.messages[0].content],
  ["messages[0].content must be a string or null", (r) => (r.messages[0].content = 5)],
  ["messages[0].tool_calls must be an array", (r) => (r.messages[0].tool_calls = "x")],
  [
    'messages[0].tool_calls[0].type must be "function"',
    (r) => (r.messages[0].tool_calls = [{ id: "c", type: "fn", function: { name: "f", arguments: "{}" } }]),
  ],
  [
    "messages[0].tool_calls[0].function.arguments must be a string",
    (r) => (r.messages[0].tool_calls = [{ id: "c", type: "function", function: { name: "f", arguments: {} } }]),
  ],
  [
    "messages[0].tool_calls[0].id is required",
    (r) => (r.messages[0].tool_calls = [{ type: "function", function: { name: "f", arguments: "{}" } }]),
  ],
  ["messages[1].tool_call_id must be a string", (r) => (r.messages[1].tool_call_id = 3)],
  ["messages[1].name must be a string", (r) => (r.messages[1].name = [])],
  ["stateId must be a non-empty string", (r) => (r.stateId = "")],
  ["tools must be an array", (r) => (r.tools = {})],
  ['tools[0].type must be "function"', (r) => (r.tools = [{ type: "tool", function: { name: "f" } }])],
  ["tools[0].function.name must be a non-empty string", (r) => (r.tools = [{ type: "function", function: { name: "" } }])],
  [
    "tools[0].function.description must be a string",
    (r) => (r.tools = [{ type: "function", function: { name: "f", description: 1 } }]),
  ],
  [
    "tools[0].function.parameters must be a map",
    (r) => (r.tools = [{ type: "function", function: { name: "f", parameters: [1] } }]),
  ],
  [
    "tools[0].function.parameters must hold only JSON values (null, booleans, finite numbers, strings, arrays, maps)",
    (r) => (r.tools = [{ type: "function", function: { name: "f", parameters: { blob: new Uint8Array([1, 2]) } } }]),
  ],
  ["sampling is required", (r) => delete r.sampling],
  ["sampling must be a map", (r) => (r.sampling = 16)],
  ["sampling.maxTokens must be an integer >= 1", (r) => (r.sampling.maxTokens = 0)],
  ["sampling.maxTokens must be an integer >= 1", (r) => (r.sampling.maxTokens = 1.5)],
  ["sampling.maxTokens must be an integer >= 1", (r) => (r.sampling.maxTokens = "16")],
  ["sampling.temperature is required", (r) => delete r.sampling.temperature],
  ["sampling.temperature must be a finite number >= 0", (r) => (r.sampling.temperature = -0.1)],
  ["sampling.temperature must be a finite number >= 0", (r) => (r.sampling.temperature = Infinity)],
  ["sampling.temperature must be a finite number >= 0", (r) => (r.sampling.temperature = NaN)],
  ["sampling.topP is required", (r) => delete r.sampling.topP],
  ["sampling.topP must be a number in (0, 1]", (r) => (r.sampling.topP = 0)],
  ["sampling.topP must be a number in (0, 1]", (r) => (r.sampling.topP = 1.01)],
  ["sampling.topK is required", (r) => delete r.sampling.topK],
  ["sampling.topK must be an integer >= 0", (r) => (r.sampling.topK = -1)],
  ["sampling.seed must be an integer", (r) => (r.sampling.seed = 0.5)],
  ["sampling.stop is required", (r) => delete r.sampling.stop],
  ["sampling.stop must be an array", (r) => (r.sampling.stop = "\n")],
  ["sampling.stop[1] must be a non-empty string", (r) => (r.sampling.stop = ["x", ""])],
  ["sampling.stopTokenIds is required", (r) => delete r.sampling.stopTokenIds],
  ["sampling.stopTokenIds[0] must be an integer in [0, 4294967295]", (r) => (r.sampling.stopTokenIds = [-1])],
  ["sampling.stopTokenIds[0] must be an integer in [0, 4294967295]", (r) => (r.sampling.stopTokenIds = [2 ** 32])],
  ["sampling.ignoreEos must be a boolean", (r) => (r.sampling.ignoreEos = "yes")],
  ["sampling.logprobs must be an integer in [0, 20]", (r) => (r.sampling.logprobs = 21)],
  ["sampling.logprobs must be an integer in [0, 20]", (r) => (r.sampling.logprobs = -1)],
  ["sampling.logprobs must be an integer in [0, 20]", (r) => (r.sampling.logprobs = 1.5)],
  ["sampling.logprobs must be an integer in [0, 20]", (r) => (r.sampling.logprobs = true)],
  ['stateId is required when mode is "delta"', (r) => (r.mode = "delta")],
  [
    'constraint.answer.type must be a map with type "json_object" or "json_schema"',
    (r) => (r.constraint = { type: "tool_calls", choice: "auto", parallel: true, answer: { type: "tool_calls" } }),
  ],
  ["constraint.answer.strict is required", (r) => (r.constraint = { type: "tool_calls", choice: "auto", parallel: true, answer: { type: "json_schema", schema: {} } })],
  ["cachePoints[0].ttlMs must be a finite number > 0", (r) => (r.cachePoints = [{ messages: 1, ttlMs: 0 }])],
  ["cachePoints[0].messages must be an integer >= 0", (r) => (r.cachePoints = [{ messages: -1, ttlMs: 300_000 }])],
  ["cachePoints must hold at most 4 points", (r) => (r.cachePoints = Array.from({ length: 5 }, () => ({ messages: 1, ttlMs: 300_000 })))],
];

describe("GenerateRequest validation", () => {
  it.each(REQUEST_FAILURES)("%s", (message, mutate) => {
    const request = clone(REQUEST) as unknown as Record<string, any>;
    mutate(request);
    const error = expectError(decodeGenerateRequest(encode(request)));
    expect(error.code).toBe("invalid_request");
    expect(error.httpStatus).toBe(400);
    expect(error.message).toBe(message);
  });

  it("rejects a value that is not a map", () => {
    for (const value of [[REQUEST], "req", 42, null]) {
      const error = expectError(decodeGenerateRequest(encode(value)));
      expect([error.code, error.message]).toEqual(["invalid_request", "request must be a map"]);
    }
  });

  it("lists several problems, at most five, separated by semicolons", () => {
    const two = clone(REQUEST) as unknown as Record<string, any>;
    two.sampling.maxTokens = 0;
    two.sampling.topK = -1;
    expect(expectError(decodeGenerateRequest(encode(two))).message).toBe(
      "sampling.maxTokens must be an integer >= 1; sampling.topK must be an integer >= 0",
    );
    expect(expectError(decodeGenerateRequest(encode({}))).message).toBe(
      "requestId is required; mode is required; messages is required; sampling is required",
    );
    const many = clone(REQUEST) as unknown as Record<string, any>;
    many.sampling = { maxTokens: 0, temperature: -1, topP: 0, topK: -1, seed: 0.5, stop: [""], stopTokenIds: [-1] };
    expect(expectError(decodeGenerateRequest(encode(many))).message).toMatch(/^sampling\.maxTokens .*; \(and 2 more\)$/);
  });

  it("takes a request without maxTokens (the backend's budget: what the context leaves) and with the thinking switch", () => {
    const request = { ...clone(REQUEST), thinking: false } as GenerateRequest;
    delete request.sampling.maxTokens;
    expect(expectOk(decodeGenerateRequest(encode(request)))).toEqual(request);
    const bad = { ...clone(REQUEST), thinking: "no" } as unknown as GenerateRequest;
    expect(expectError(decodeGenerateRequest(encode(bad))).message).toBe("thinking must be a boolean");
    expect(expectOk(decodeTokenizeRequest(encode({ messages: REQUEST.messages, thinking: true })))).toEqual({ messages: REQUEST.messages, thinking: true });
  });

  it("carries cache points", () => {
    const request = { ...clone(REQUEST), cachePoints: [{ messages: 0, ttlMs: 300_000 }, { messages: 2, ttlMs: 3_600_000 }] } as GenerateRequest;
    expect(expectOk(decodeGenerateRequest(encode(request)))).toEqual(request);
  });

  it("carries a tool-calls constraint with a JSON answer", () => {
    const request = { ...clone(REQUEST), constraint: { type: "tool_calls", choice: "auto", parallel: false, answer: { type: "json_schema", schema: { type: "object" }, strict: true } } } as GenerateRequest;
    expect(expectOk(decodeGenerateRequest(encode(request)))).toEqual(request);
  });

  it("accepts null content, an empty model and a delta turn with a stateId", () => {
    const request = { ...clone(REQUEST), model: "", mode: "delta", stateId: "s-1" } as GenerateRequest;
    request.messages[0] = { role: "assistant", content: null };
    expect(expectOk(decodeGenerateRequest(encode(request)))).toEqual(request);
  });
});

describe("ReleaseStateRequest validation", () => {
  it.each([
    [{}, "stateId is required"],
    [{ stateId: "" }, "stateId must be a non-empty string"],
    [{ stateId: 5 }, "stateId must be a non-empty string"],
    ["s-1", "request must be a map"],
  ])("%j → %s", (value, message) => {
    const error = expectError(decodeReleaseStateRequest(encode(value)));
    expect([error.code, error.message]).toEqual(["invalid_request", message]);
  });
});

const FRAME_FAILURES: [string, unknown][] = [
  ["frame must be a map", 5],
  ["frame must be a map", [TOKEN]],
  ["type is required", { tokenIds: [], text: "" }],
  ['type must be one of "token", "done", "error"', { type: "tokens", tokenIds: [], text: "" }],
  ["tokenIds is required", { type: "token", text: "" }],
  ["tokenIds[1] must be an integer in [0, 4294967295]", { type: "token", tokenIds: [1, 1.5], text: "" }],
  ["text must be a string", { type: "token", tokenIds: [], text: null }],
  ["logprobs must be an array", { ...TOKEN_LOGPROBS, logprobs: {} }],
  ["logprobs must hold one entry per token id", { ...TOKEN_LOGPROBS, tokenIds: [126] }],
  ["logprobs must hold one entry per token id", { ...TOKEN_LOGPROBS, logprobs: [] }],
  ["logprobs[0].token is required", { ...TOKEN_LOGPROBS, logprobs: [{ ...TOKEN_LOGPROBS.logprobs![0], token: undefined }, TOKEN_LOGPROBS.logprobs![1]] }],
  ["logprobs[1].logprob must be a finite number <= 0", { ...TOKEN_LOGPROBS, logprobs: [TOKEN_LOGPROBS.logprobs![0], { ...TOKEN_LOGPROBS.logprobs![1], logprob: 0.5 }] }],
  ["logprobs[1].logprob must be a finite number <= 0", { ...TOKEN_LOGPROBS, logprobs: [TOKEN_LOGPROBS.logprobs![0], { ...TOKEN_LOGPROBS.logprobs![1], logprob: -Infinity }] }],
  ["logprobs[1].logprob must be a finite number <= 0", { ...TOKEN_LOGPROBS, logprobs: [TOKEN_LOGPROBS.logprobs![0], { ...TOKEN_LOGPROBS.logprobs![1], logprob: NaN }] }],
  ["logprobs[0].bytes[0] must be an integer in [0, 255]", { ...TOKEN_LOGPROBS, logprobs: [{ ...TOKEN_LOGPROBS.logprobs![0], bytes: [256] }, TOKEN_LOGPROBS.logprobs![1]] }],
  ["logprobs[0].topLogprobs is required", { ...TOKEN_LOGPROBS, logprobs: [{ ...TOKEN_LOGPROBS.logprobs![0], topLogprobs: undefined }, TOKEN_LOGPROBS.logprobs![1]] }],
  [
    "logprobs[0].topLogprobs[1].bytes must be an array",
    { ...TOKEN_LOGPROBS, logprobs: [{ ...TOKEN_LOGPROBS.logprobs![0], topLogprobs: [{ token: "a", bytes: [97], logprob: -1 }, { token: "b", bytes: "b", logprob: -2 }] }, TOKEN_LOGPROBS.logprobs![1]] },
  ],
  [
    "logprobs[0].topLogprobs must hold at most 20 entries",
    { ...TOKEN_LOGPROBS, logprobs: [{ ...TOKEN_LOGPROBS.logprobs![0], topLogprobs: Array.from({ length: 21 }, () => ({ token: "a", bytes: [97], logprob: -1 })) }, TOKEN_LOGPROBS.logprobs![1]] },
  ],
  ['finishReason must be one of "stop", "length", "stop_sequence", "cancelled"', { ...DONE, finishReason: "eos" }],
  ["stateId must be a non-empty string", { ...DONE, stateId: "" }],
  ["usage is required", { ...DONE, usage: undefined }],
  ["usage.completionTokens must be an integer >= 0", { ...DONE, usage: { ...DONE.usage, completionTokens: -1 } }],
  ["usage.cachedTokens must be <= promptTokens", { ...DONE, usage: { ...DONE.usage, cachedTokens: 49 } }],
  ["timings.ttftMs must be a finite number >= 0", { ...DONE, timings: { ...DONE.timings, ttftMs: -1 } }],
  ["backendId must be a string", { ...DONE, backendId: 0 }],
  ["stopSequence must be a non-empty string", { ...DONE, finishReason: "stop_sequence", stopSequence: "" }],
  ["stopSequence must be a non-empty string", { ...DONE, finishReason: "stop_sequence", stopSequence: 1 }],
  ["promptBlockHashes[1] must be a 16-character lowercase hex string", { ...DONE, promptBlockHashes: ["0123456789abcdef", "0123456789ABCDEF"] }],
  ["promptBlockHashes[0] must be a 16-character lowercase hex string", { ...DONE, promptBlockHashes: ["0123456789abcdef0123456789abcdef"] }],
  ["cacheWrites[0].tokens must be an integer >= 0", { ...DONE, cacheWrites: [{ ttlMs: 300_000, tokens: -1 }] }],
  ["cacheWrites[0].ttlMs must be a finite number > 0", { ...DONE, cacheWrites: [{ ttlMs: 0, tokens: 16 }] }],
  ["promptBlockHashes must hold at most 4096 hashes", { ...DONE, promptBlockHashes: Array.from({ length: 4097 }, () => "0123456789abcdef") }],
  ["message is required", { ...DONE, message: undefined }],
  ['message.role must be "assistant"', { ...DONE, message: { ...DONE.message, role: "user" } }],
  ["message.content is required", { ...DONE, message: { role: "assistant" } }],
  ["message.content must be a string or null", { ...DONE, message: { role: "assistant", content: 5 } }],
  [
    "message.tool_calls[0].function.name must be a non-empty string",
    { ...DONE_TOOL_CALL, message: { ...DONE_TOOL_CALL.message, tool_calls: [{ id: "c", type: "function", function: { name: "", arguments: "{}" } }] } },
  ],
  [
    'code must be one of "malformed_msgpack", "invalid_request", "unauthorized", "unknown_model", "state_unknown", ' +
      '"context_length_exceeded", "overloaded", "not_found", "payload_too_large", "trajectory_busy", "backend_unavailable", "internal_error", "invalid_schema", "unsupported_schema", "unknown_tool", "max_tokens_too_small", "limit_exceeded", "headers_too_large", "upgrade_required", "response_already_in_flight", "websocket_connection_limit_reached"',
    { ...ERROR, code: "teapot" },
  ],
  ["message must be a string", { ...ERROR, message: 1 }],
  ["retryable is required", { type: "error", code: "overloaded", message: "busy" }],
  ["retryable must be a boolean", { ...ERROR, retryable: "no" }],
  ["retryAfterS must be an integer >= 1", { ...ERROR, code: "overloaded", retryable: true, retryAfterS: 0 }],
  ["retryAfterS must be an integer >= 1", { ...ERROR, code: "overloaded", retryable: true, retryAfterS: 2.5 }],
];

describe("Frame validation", () => {
  it.each(FRAME_FAILURES)("%s", (message, value) => {
    const error = expectError(decodeFrame(encode(value)));
    expect([error.code, error.message]).toEqual(["invalid_request", message]);
  });
});

describe("Heartbeat validation (JSON)", () => {
  const beat = { id: "gpu-a", url: "http://10.0.0.2:8080", model: "m", kvCapacityBlocks: 64, running: 1, waiting: 2, kvUsage: 0.5, tokensPerS: 100 };

  it("takes the queue fields, and a beat without them (an older backend)", () => {
    expect(expectOk(validateHeartbeat({ ...beat, queuedTokens: 4096, prefillTokensPerS: 812.5 }))).toMatchObject({ queuedTokens: 4096, prefillTokensPerS: 812.5 });
    expect(expectOk(validateHeartbeat(beat)).queuedTokens).toBeUndefined();
  });

  const cases: [string, unknown][] = [
    ["queuedTokens must be an integer >= 0", { ...beat, queuedTokens: -1 }],
    ["queuedTokens must be an integer >= 0", { ...beat, queuedTokens: 1.5 }],
    ["prefillTokensPerS must be a finite number >= 0", { ...beat, prefillTokensPerS: -3 }],
    ["prefillTokensPerS must be a finite number >= 0", { ...beat, prefillTokensPerS: "fast" }],
  ];
  it.each(cases)("%s", (message, value) => {
    const error = expectError(validateHeartbeat(value));
    expect([error.code, error.message]).toEqual(["invalid_request", message]);
  });
});

describe("TokenizeRequest and TokenizeResponse validation", () => {
  const cases: [string, unknown, (bytes: Uint8Array) => DecodeResult<unknown>][] = [
    ["messages is required", { model: "m" }, decodeTokenizeRequest],
    ["messages must be a non-empty array", { messages: [] }, decodeTokenizeRequest],
    ["messages[0].content must be a string or null", { messages: [{ role: "user", content: 5 }] }, decodeTokenizeRequest],
    ["tools must be an array", { messages: [{ role: "user", content: "hi" }], tools: {} }, decodeTokenizeRequest],
    ["model must be a string", { model: 1, messages: [{ role: "user", content: "hi" }] }, decodeTokenizeRequest],
    ["promptTokens is required", {}, decodeTokenizeResponse],
    ["promptTokens must be an integer >= 0", { promptTokens: -1 }, decodeTokenizeResponse],
  ];
  it.each(cases)("%s", (message, value, decode) => {
    const error = expectError(decode(encode(value)));
    expect([error.code, error.message]).toEqual(["invalid_request", message]);
  });
});

// ---------------------------------------------------------------------------------------------
// Malformed bytes
// ---------------------------------------------------------------------------------------------

describe("malformed msgpack", () => {
  const cases: [string, Uint8Array][] = [
    ["empty input", new Uint8Array(0)],
    ["a truncated value", fromHex(GOLDEN_REQUEST).subarray(0, 40)],
    ["one byte missing at the end", fromHex(GOLDEN_REQUEST.slice(0, -2))],
    ["trailing bytes after the value", concatBytes(fromHex(GOLDEN_REQUEST), fromHex("00"))],
    ["two values back to back", concatBytes(fromHex(GOLDEN_REQUEST), fromHex(GOLDEN_REQUEST))],
    ["plain text", utf8("not msgpack at all")],
    ["JSON", utf8(JSON.stringify(REQUEST))],
    ["the reserved byte 0xc1", fromHex("c1")],
    ["0xc1 nested in a map", fromHex("81a9726571756573744964c1")],
    ["a str32 header claiming 4 GiB", fromHex("dbffffffff61")],
    ["an unknown extension type", fromHex("d40500")],
  ];

  it.each(cases)("%s gives malformed_msgpack", (_name, bytes) => {
    const error = expectError(decodeGenerateRequest(bytes));
    expect(error.code).toBe("malformed_msgpack");
    expect(error.httpStatus).toBe(400);
    expect(error.retryable).toBe(false);
    expect(error.message).toMatch(/^request/);
  });

  it("applies to every decoder", () => {
    expect(expectError(decodeReleaseStateRequest(fromHex("c1"))).code).toBe("malformed_msgpack");
    expect(expectError(decodeFrame(utf8("garbage"))).code).toBe("malformed_msgpack");
    expect(expectError(decodeFrame(concatBytes(encode(TOKEN), encode(TOKEN)))).code).toBe("malformed_msgpack");
  });
});
