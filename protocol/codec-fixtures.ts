import { expect } from "vitest";
import type { DecodeResult } from "./codec";
import { ProtocolError } from "./errors";
import type { DoneFrame, ErrorFrame, GenerateRequest, TokenFrame } from "./messages";

/**
 * What the codec's tests share (codec.test.ts, codec-encode.test.ts, codec-validation.test.ts):
 * byte helpers, result assertions, one value of each message and frame type, and the pinned
 * bytes of the golden tests. Test support only: nothing outside tests imports it.
 */

export const toHex = (bytes: Uint8Array): string => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
export const fromHex = (hex: string): Uint8Array => new Uint8Array((hex.match(/../g) ?? []).map((h) => parseInt(h, 16)));
export const utf8 = (s: string): Uint8Array => new TextEncoder().encode(s);
export const concatBytes = (...parts: Uint8Array[]): Uint8Array => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.length;
  }
  return out;
};
export const clone = <T>(v: T): T => structuredClone(v);

export function expectOk<T>(result: DecodeResult<T>): T {
  if (!result.ok) throw new Error(`expected ok, got ${result.error.code}: ${result.error.message}`);
  return result.value;
}

export function expectError<T>(result: DecodeResult<T>): ProtocolError {
  if (result.ok) throw new Error(`expected an error, got ${JSON.stringify(result.value)}`);
  expect(result.error).toBeInstanceOf(ProtocolError);
  return result.error;
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

export const REQUEST: GenerateRequest = {
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

export const TOKEN: TokenFrame = { type: "token", tokenIds: [9707, 0, 65535], text: "Hello" };

/** A token frame of a request that asked for logprobs (`sampling.logprobs: 2`): "é" split in two tokens. */
export const TOKEN_LOGPROBS: TokenFrame = {
  type: "token",
  tokenIds: [126, 102],
  text: "é",
  logprobs: [
    {
      token: "\uFFFD",
      bytes: [0xc3],
      logprob: -0.25,
      topLogprobs: [
        { token: "\uFFFD", bytes: [0xc3], logprob: -0.25 },
        { token: " the", bytes: [32, 116, 104, 101], logprob: -2.5 },
      ],
    },
    { token: "\uFFFD", bytes: [0xa9], logprob: 0, topLogprobs: [{ token: "\uFFFD", bytes: [0xa9], logprob: 0 }, { token: "", bytes: [], logprob: -9999 }] },
  ],
};

export const DONE: DoneFrame = {
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
export const DONE_TOOL_CALL: DoneFrame = {
  ...DONE,
  text: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
  message: {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_0123456789abcdef01234567", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris"}' } }],
  },
};

export const ERROR: ErrorFrame = { type: "error", code: "state_unknown", message: "state s-9 is unknown", retryable: false };

/** A delta turn that uses every optional field. */
export const DELTA_REQUEST: GenerateRequest = {
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

export const GOLDEN_REQUEST =
  "87a9726571756573744964a57265712d31a56d6f64656cb164656d6f2d6c6c616d612d72616e646f6dac7472616a6563746f72794964a3742d31" +
  "a9636163686553616c74a874656e616e742d61a46d6f6465a466756c6ca86d657373616765739282a4726f6c65a673797374656da7636f6e74656e74" +
  "ae596f75206172652074657273652e82a4726f6c65a475736572a7636f6e74656e74a24869a873616d706c696e6787a96d6178546f6b656e7310ab74" +
  "656d706572617475726500a4746f705001a4746f704b00a47365656407a473746f7091a20a0aac73746f70546f6b656e49647391ce0002505d";
export const GOLDEN_TOKEN = "83a474797065a5746f6b656ea8746f6b656e49647393cd25eb00cdffffa474657874a548656c6c6f";
export const GOLDEN_DONE =
  "88a474797065a4646f6e65ac66696e697368526561736f6ea473746f70a773746174654964a3732d31a474657874a548656c6c6fa76d657373616765" +
  "82a4726f6c65a9617373697374616e74a7636f6e74656e74a548656c6c6fa5757361676584ac70726f6d7074546f6b656e7330ac636163686564546f" +
  "6b656e7320ae636f6d7075746564546f6b656e7310b0636f6d706c6574696f6e546f6b656e7303a774696d696e677385a771756575654d7300a97072" +
  "6566696c6c4d73cb3ff8000000000000a6747466744d73cb4002000000000000a86465636f64654d730aa7746f74616c4d73cb4028800000000000a9" +
  "6261636b656e644964a3622d30";
export const GOLDEN_ERROR =
  "84a474797065a56572726f72a4636f6465ad73746174655f756e6b6e6f776ea76d657373616765b4737461746520732d3920697320756e6b6e6f776e" +
  "a9726574727961626c65c2";
