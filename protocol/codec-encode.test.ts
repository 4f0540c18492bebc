import { describe, expect, it } from "vitest";
import { decodeFrame, decodeGenerateRequest, decodeReleaseStateRequest, decodeTokenizeRequest, decodeTokenizeResponse, encode } from "./codec";
import type { Frame, GenerateRequest, TokenFrame, TokenizeRequest } from "./messages";
import { DELTA_REQUEST, DONE, DONE_TOOL_CALL, ERROR, expectOk, fromHex, GOLDEN_DONE, GOLDEN_ERROR, GOLDEN_REQUEST, GOLDEN_TOKEN, REQUEST, toHex, TOKEN, TOKEN_LOGPROBS } from "./codec-fixtures";

// Golden bytes: any change to the encoding breaks these on purpose (the pinned bytes: codec-fixtures.ts).

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

  it("keeps the logprobs ask, 0 to 20 alternatives", () => {
    for (const logprobs of [0, 5, 20]) {
      const request: GenerateRequest = { ...REQUEST, sampling: { ...REQUEST.sampling, logprobs } };
      expect(expectOk(decodeGenerateRequest(encode(request)))).toEqual(request);
    }
    expect("logprobs" in expectOk(decodeGenerateRequest(encode(REQUEST))).sampling).toBe(false);
  });

  it("keeps a token frame's logprobs exactly (raw bytes of a split character, -9999, exact floats)", () => {
    expect(expectOk(decodeFrame(encode(TOKEN_LOGPROBS)))).toEqual(TOKEN_LOGPROBS);
    const precise: TokenFrame = { type: "token", tokenIds: [1], text: "a", logprobs: [{ token: "a", bytes: [97], logprob: Math.log(0.3), topLogprobs: [] }] };
    const decoded = expectOk(decodeFrame(encode(precise))) as TokenFrame;
    expect(decoded.logprobs![0]!.logprob).toBe(Math.log(0.3));
  });

  it("keeps a ReleaseStateRequest", () => {
    expect(expectOk(decodeReleaseStateRequest(encode({ stateId: "s-1" })))).toEqual({ stateId: "s-1" });
  });

  it("keeps a TokenizeRequest and its answer", () => {
    const request: TokenizeRequest = { model: "m", messages: DELTA_REQUEST.messages, tools: DELTA_REQUEST.tools! };
    expect(expectOk(decodeTokenizeRequest(encode(request)))).toEqual(request);
    expect(expectOk(decodeTokenizeRequest(encode({ messages: [{ role: "user", content: "hi" }] })))).toEqual({ messages: [{ role: "user", content: "hi" }] });
    expect(expectOk(decodeTokenizeResponse(encode({ promptTokens: 42 })))).toEqual({ promptTokens: 42 });
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
      { ...DONE, finishReason: "stop_sequence", stopSequence: "\nUser:" },
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
