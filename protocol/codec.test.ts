import { describe, expect, it } from "vitest";
import {
  decodeFrame,
  decodeGenerateRequest,
  decodeReleaseStateRequest,
  encode,
  FrameDecoder,
  type DecodeResult,
} from "./codec";
import { ProtocolError } from "./errors";
import { mulberry32 } from "./random";
import type { DoneFrame, ErrorFrame, Frame, GenerateRequest, TokenFrame } from "./messages";

const toHex = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
const fromHex = (hex: string): Uint8Array => new Uint8Array((hex.match(/../g) ?? []).map((h) => parseInt(h, 16)));
const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);
const concatBytes = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
};
const clone = <T>(v: T): T => structuredClone(v);

function expectOk<T>(result: DecodeResult<T>): T {
  if (!result.ok) throw new Error(`expected ok, got ${result.error.code}: ${result.error.message}`);
  return result.value;
}

function expectError<T>(result: DecodeResult<T>): ProtocolError {
  if (result.ok) throw new Error(`expected an error, got ${JSON.stringify(result.value)}`);
  expect(result.error).toBeInstanceOf(ProtocolError);
  return result.error;
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

const REQUEST: GenerateRequest = {
  requestId: "req-1",
  model: "demo-llama-random",
  trajectoryId: "t-1",
  cacheSalt: "tenant-a",
  mode: "full",
  messages: [
    { role: "system", content: "You are terse." },
    { role: "user", content: "Hi" },
  ],
  sampling: { maxTokens: 16, temperature: 0, topP: 1, topK: 0, seed: 7, stop: ["\n\n"], stopTokenIds: [151645] },
};

const TOKEN: TokenFrame = { type: "token", tokenIds: [9707, 0, 65535], text: "Hello" };

const DONE: DoneFrame = {
  type: "done",
  finishReason: "stop",
  stateId: "s-1",
  text: "Hello",
  message: { role: "assistant", content: "Hello" },
  usage: { promptTokens: 48, cachedTokens: 32, computedTokens: 16, completionTokens: 3 },
  timings: { queueMs: 0, prefillMs: 1.5, ttftMs: 2.25, decodeMs: 10, totalMs: 12.25 },
  backendId: "b-0",
};

/** A reply that is only a tool call (Qwen's `<tool_call>` block), parsed: content null. */
const DONE_TOOL_CALL: DoneFrame = {
  ...DONE,
  text: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
  message: {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_0123456789abcdef01234567", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }],
  },
};

const ERROR: ErrorFrame = { type: "error", code: "state_unknown", message: "state s-9 is unknown", retryable: false };

/** A delta turn that uses every optional field. */
const DELTA_REQUEST: GenerateRequest = {
  requestId: "req-2",
  trajectoryId: "t-1",
  mode: "delta",
  stateId: "s-1",
  messages: [
    {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "call-1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
    },
    { role: "tool", content: '{"temp":21}', tool_call_id: "call-1", name: "get_weather" },
  ],
  tools: [
    {
      type: "function",
      function: {
        name: "get_weather",
        description: "Current weather",
        parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
      },
    },
  ],
  sampling: { maxTokens: 256, temperature: 0.7, topP: 0.95, topK: 40, stop: [], stopTokenIds: [], ignoreEos: true },
};

// ---------------------------------------------------------------------------------------------
// Golden bytes: any change to the encoding breaks these on purpose.
// ---------------------------------------------------------------------------------------------

const GOLDEN_REQUEST =
  "87a9726571756573744964a57265712d31a56d6f64656cb164656d6f2d6c6c616d612d72616e646f6dac7472616a6563746f72794964a3742d31" +
  "a9636163686553616c74a874656e616e742d61a46d6f6465a466756c6ca86d657373616765739282a4726f6c65a673797374656da7636f6e74656e74" +
  "ae596f75206172652074657273652e82a4726f6c65a475736572a7636f6e74656e74a24869a873616d706c696e6787a96d6178546f6b656e7310ab74" +
  "656d706572617475726500a4746f705001a4746f704b00a47365656407a473746f7091a20a0aac73746f70546f6b656e49647391ce0002505d";
const GOLDEN_TOKEN = "83a474797065a5746f6b656ea8746f6b656e49647393cd25eb00cdffffa474657874a548656c6c6f";
const GOLDEN_DONE =
  "88a474797065a4646f6e65ac66696e697368526561736f6ea473746f70a773746174654964a3732d31a474657874a548656c6c6fa76d657373616765" +
  "82a4726f6c65a9617373697374616e74a7636f6e74656e74a548656c6c6fa5757361676584ac70726f6d7074546f6b656e7330ac636163686564546f" +
  "6b656e7320ae636f6d7075746564546f6b656e7310b0636f6d706c6574696f6e546f6b656e7303a774696d696e677385a771756575654d7300a97072" +
  "6566696c6c4d73cb3ff8000000000000a6747466744d73cb4002000000000000a86465636f64654d730aa7746f74616c4d73cb4028800000000000a9" +
  "6261636b656e644964a3622d30";
const GOLDEN_ERROR =
  "84a474797065a56572726f72a4636f6465ad73746174655f756e6b6e6f776ea76d657373616765b4737461746520732d3920697320756e6b6e6f776e" +
  "a9726574727961626c65c2";

describe("golden bytes", () => {
  it("encodes a GenerateRequest to the pinned bytes", () => {
    expect(toHex(encode(REQUEST))).toBe(GOLDEN_REQUEST);
  });

  it("encodes a TokenFrame to the pinned bytes", () => {
    expect(toHex(encode(TOKEN))).toBe(GOLDEN_TOKEN);
  });

  it("encodes a DoneFrame to the pinned bytes (integers compact, fractions float64)", () => {
    expect(toHex(encode(DONE))).toBe(GOLDEN_DONE);
  });

  it("encodes an ErrorFrame to the pinned bytes", () => {
    expect(toHex(encode(ERROR))).toBe(GOLDEN_ERROR);
  });

  it("decodes the pinned bytes back to the same values", () => {
    expect(expectOk(decodeGenerateRequest(fromHex(GOLDEN_REQUEST)))).toEqual(REQUEST);
    expect(expectOk(decodeFrame(fromHex(GOLDEN_TOKEN)))).toEqual(TOKEN);
    expect(expectOk(decodeFrame(fromHex(GOLDEN_DONE)))).toEqual(DONE);
    expect(expectOk(decodeFrame(fromHex(GOLDEN_ERROR)))).toEqual(ERROR);
  });
});

describe("encode", () => {
  it("leaves out properties whose value is undefined, as JSON does", () => {
    expect(toHex(encode({ a: undefined, b: 1 }))).toBe("81a16201");
  });

  it("returns a plain Uint8Array that owns its buffer and survives later encodes", () => {
    const first = encode(TOKEN);
    const copy = first.slice();
    for (let i = 0; i < 2000; i++) encode({ i, text: "x".repeat(i % 100) });
    expect(Object.getPrototypeOf(first)).toBe(Uint8Array.prototype);
    expect(first.byteOffset).toBe(0);
    expect(first.buffer.byteLength).toBe(first.length);
    expect(first).toEqual(copy);
  });
});

// ---------------------------------------------------------------------------------------------
// Round trips and interoperability
// ---------------------------------------------------------------------------------------------

describe("round trips", () => {
  it("keeps every field of a delta GenerateRequest", () => {
    expect(expectOk(decodeGenerateRequest(encode(DELTA_REQUEST)))).toEqual(DELTA_REQUEST);
  });

  it("keeps a ReleaseStateRequest", () => {
    expect(expectOk(decodeReleaseStateRequest(encode({ stateId: "s-1" })))).toEqual({ stateId: "s-1" });
  });

  it("keeps every frame type, every finish reason and every error code", () => {
    const frames: Frame[] = [
      TOKEN,
      { type: "token", tokenIds: [], text: "" },
      { type: "token", tokenIds: [0xffff_ffff], text: "é😀" },
      ...(["stop", "length", "stop_sequence", "cancelled"] as const).map((finishReason) => ({ ...DONE, finishReason })),
      DONE_TOOL_CALL,
      { ...DONE, text: "", message: { role: "assistant", content: "" } },
      { ...DONE, promptBlockHashes: ["0123456789abcdef", "fedcba9876543210"] },
      { ...DONE, promptBlockHashes: [] },
      ...(
        [
          "malformed_msgpack",
          "invalid_request",
          "unauthorized",
          "unknown_model",
          "state_unknown",
          "context_length_exceeded",
          "overloaded",
          "not_found",
          "internal_error",
        ] as const
      ).map((code) => ({ ...ERROR, code, retryable: code === "overloaded" })),
    ];
    for (const frame of frames) expect(expectOk(decodeFrame(encode(frame)))).toEqual(frame);
  });

  it("strips unknown keys (a newer peer may add fields)", () => {
    const value = expectOk(decodeGenerateRequest(encode({ ...REQUEST, futureField: 1 })));
    expect(value).toEqual(REQUEST);
    expect("futureField" in value).toBe(false);
  });

  it("reads 64-bit integers as numbers", () => {
    // {type:"token", tokenIds:[uint64 42], text:""}
    const bytes = fromHex("83a474797065a5746f6b656ea8746f6b656e49647391cf000000000000002aa474657874a0");
    expect(expectOk(decodeFrame(bytes))).toEqual({ type: "token", tokenIds: [42], text: "" });
  });

  it("reads map16 headers written by other encoders", () => {
    // {stateId:"s-1"} with a map16 header (0xde 0x0001) instead of a fixmap
    expect(expectOk(decodeReleaseStateRequest(fromHex("de0001a773746174654964a3732d31")))).toEqual({ stateId: "s-1" });
  });

  it("decodes from a view into a larger buffer", () => {
    const bytes = encode(TOKEN);
    const padded = new Uint8Array(bytes.length + 10);
    padded.set(bytes, 5);
    expect(expectOk(decodeFrame(padded.subarray(5, 5 + bytes.length)))).toEqual(TOKEN);
  });
});

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
  ["sampling.maxTokens is required", (r) => delete r.sampling.maxTokens],
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
  ['stateId is required when mode is "delta"', (r) => (r.mode = "delta")],
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
  ['finishReason must be one of "stop", "length", "stop_sequence", "cancelled"', { ...DONE, finishReason: "eos" }],
  ["stateId must be a non-empty string", { ...DONE, stateId: "" }],
  ["usage is required", { ...DONE, usage: undefined }],
  ["usage.completionTokens must be an integer >= 0", { ...DONE, usage: { ...DONE.usage, completionTokens: -1 } }],
  ["usage.cachedTokens must be <= promptTokens", { ...DONE, usage: { ...DONE.usage, cachedTokens: 49 } }],
  ["timings.ttftMs must be a finite number >= 0", { ...DONE, timings: { ...DONE.timings, ttftMs: -1 } }],
  ["backendId must be a string", { ...DONE, backendId: 0 }],
  ["promptBlockHashes[1] must be a 16-character lowercase hex string", { ...DONE, promptBlockHashes: ["0123456789abcdef", "0123456789ABCDEF"] }],
  ["promptBlockHashes[0] must be a 16-character lowercase hex string", { ...DONE, promptBlockHashes: ["0123456789abcdef0123456789abcdef"] }],
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
      '"context_length_exceeded", "overloaded", "not_found", "payload_too_large", "trajectory_busy", "backend_unavailable", "internal_error"',
    { ...ERROR, code: "teapot" },
  ],
  ["message must be a string", { ...ERROR, message: 1 }],
  ["retryable is required", { type: "error", code: "overloaded", message: "busy" }],
  ["retryable must be a boolean", { ...ERROR, retryable: "no" }],
];

describe("Frame validation", () => {
  it.each(FRAME_FAILURES)("%s", (message, value) => {
    const error = expectError(decodeFrame(encode(value)));
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

// ---------------------------------------------------------------------------------------------
// Streaming frame decoder
// ---------------------------------------------------------------------------------------------

/** Frames that exercise fix, 8-, 16- and 32-bit headers for strings, arrays and maps. */
const STREAM_FRAMES: Frame[] = [
  TOKEN,
  { type: "token", tokenIds: [], text: "" },
  { type: "token", tokenIds: [1, 200, 70_000, 0xffff_ffff], text: "x".repeat(40) }, // str8
  { type: "token", tokenIds: Array.from({ length: 20 }, (_, i) => i * 1000), text: "é😀".repeat(50) }, // array16, str16
  DONE,
  { ...ERROR, code: "overloaded", retryable: true },
];
const STREAM = concatBytes(...STREAM_FRAMES.map(encode));

function feed(decoder: FrameDecoder, chunks: Uint8Array[]): Frame[] {
  const frames: Frame[] = [];
  for (const chunk of chunks) frames.push(...decoder.push(chunk));
  decoder.end();
  return frames;
}

describe("FrameDecoder", () => {
  it("yields every frame of a stream pushed in one chunk", () => {
    expect(feed(new FrameDecoder(), [STREAM])).toEqual(STREAM_FRAMES);
  });

  it("yields the same frames for a split at every possible boundary", () => {
    for (let cut = 0; cut <= STREAM.length; cut++) {
      const frames = feed(new FrameDecoder(), [STREAM.subarray(0, cut), STREAM.subarray(cut)]);
      expect(frames, `split at ${cut}`).toEqual(STREAM_FRAMES);
    }
  });

  it("yields the same frames fed one byte at a time, each frame as soon as its last byte came", () => {
    const decoder = new FrameDecoder();
    const ends = new Set<number>();
    let offset = 0;
    for (const frame of STREAM_FRAMES) ends.add((offset += encode(frame).length));
    const frames: Frame[] = [];
    for (let i = 0; i < STREAM.length; i++) {
      const out = decoder.push(STREAM.subarray(i, i + 1));
      expect(out.length, `after byte ${i}`).toBe(ends.has(i + 1) ? 1 : 0);
      frames.push(...out);
    }
    decoder.end();
    expect(frames).toEqual(STREAM_FRAMES);
    expect(decoder.bufferedBytes).toBe(0);
  });

  it("yields the same frames for random chunkings", () => {
    const random = mulberry32(42);
    for (let trial = 0; trial < 300; trial++) {
      const chunks: Uint8Array[] = [];
      for (let at = 0; at < STREAM.length; ) {
        const size = 1 + Math.floor(random() * 64);
        chunks.push(STREAM.subarray(at, at + size));
        at += size;
      }
      expect(feed(new FrameDecoder(), chunks), `trial ${trial}`).toEqual(STREAM_FRAMES);
    }
  });

  it("handles a 200 KB frame (str32) arriving in 1000-byte chunks", () => {
    const big: TokenFrame = { type: "token", tokenIds: [1], text: "ab".repeat(100_000) };
    const bytes = concatBytes(encode(big), encode(TOKEN));
    const decoder = new FrameDecoder();
    const frames: Frame[] = [];
    for (let at = 0; at < bytes.length; at += 1000) {
      frames.push(...decoder.push(bytes.subarray(at, at + 1000)));
      if (at + 1000 < bytes.length - encode(TOKEN).length) expect(frames).toEqual([]);
    }
    decoder.end();
    expect(frames).toEqual([big, TOKEN]);
  });

  it("ignores empty chunks and keeps its own copy of each chunk", () => {
    const decoder = new FrameDecoder();
    const bytes = encode(TOKEN);
    const chunk = bytes.slice(0, 5);
    expect(decoder.push(new Uint8Array(0))).toEqual([]);
    expect(decoder.push(chunk)).toEqual([]);
    chunk.fill(0); // the caller reuses its buffer
    expect(decoder.push(bytes.subarray(5))).toEqual([TOKEN]);
  });

  it("reports a stream that ends inside a frame", () => {
    const decoder = new FrameDecoder();
    expect(decoder.push(STREAM.subarray(0, STREAM.length - 1))).toEqual(STREAM_FRAMES.slice(0, -1));
    expect(decoder.bufferedBytes).toBeGreaterThan(0);
    expect(() => decoder.end()).toThrow(ProtocolError);
    try {
      decoder.end();
    } catch (e) {
      expect((e as ProtocolError).code).toBe("malformed_msgpack");
    }
  });

  it("fails with malformed_msgpack on corrupt bytes and stays failed", () => {
    for (const garbage of [fromHex("c1"), fromHex("d40500"), fromHex("c7030561626300")]) {
      const decoder = new FrameDecoder();
      let first: unknown;
      try {
        decoder.push(concatBytes(encode(TOKEN), garbage));
      } catch (e) {
        first = e;
      }
      expect(first).toBeInstanceOf(ProtocolError);
      expect((first as ProtocolError).code).toBe("malformed_msgpack");
      expect(() => decoder.push(encode(TOKEN))).toThrow(first as Error);
      expect(() => decoder.end()).toThrow(first as Error);
    }
  });

  it("fails with invalid_request on a well-formed value that is not a frame", () => {
    const decoder = new FrameDecoder();
    let error: unknown;
    try {
      decoder.push(concatBytes(encode(TOKEN), encode({ type: "token", tokenIds: [-1], text: "" })));
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ProtocolError);
    expect((error as ProtocolError).code).toBe("invalid_request");
    expect((error as ProtocolError).message).toBe("tokenIds[0] must be an integer in [0, 4294967295]");
  });

  it("throws only ProtocolErrors on randomly corrupted streams, whatever the chunking", () => {
    const random = mulberry32(7);
    for (let trial = 0; trial < 500; trial++) {
      const corrupted = STREAM.slice();
      for (let flips = 1 + Math.floor(random() * 3); flips > 0; flips--) {
        corrupted[Math.floor(random() * corrupted.length)] = Math.floor(random() * 256);
      }
      const decoder = new FrameDecoder({ maxFrameBytes: 4096 });
      try {
        for (let at = 0; at < corrupted.length; ) {
          const size = 1 + Math.floor(random() * 32);
          decoder.push(corrupted.subarray(at, at + size));
          at += size;
        }
        decoder.end();
      } catch (e) {
        expect(e, `trial ${trial}`).toBeInstanceOf(ProtocolError);
        expect(["malformed_msgpack", "invalid_request"]).toContain((e as ProtocolError).code);
      }
    }
  });

  it("rejects a frame longer than maxFrameBytes, from its header or from what it buffered", () => {
    const fromHeader = new FrameDecoder({ maxFrameBytes: 1024 });
    // a str32 header announcing 4 GiB: waiting for it would buffer forever
    expect(() => fromHeader.push(fromHex("dbffffffff61"))).toThrow(/exceeds the limit of 1024/);

    const fromBuffer = new FrameDecoder({ maxFrameBytes: 1024 });
    const big = encode({ type: "token", tokenIds: Array.from({ length: 600 }, (_, i) => i), text: "" });
    expect(() => feed(fromBuffer, [big.subarray(0, 1100)])).toThrow(/exceeds the limit of 1024/);

    expect(feed(new FrameDecoder({ maxFrameBytes: big.length }), [big.subarray(0, 700), big.subarray(700)])).toHaveLength(1);
  });
});
