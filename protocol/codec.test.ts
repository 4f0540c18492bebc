import { describe, expect, it } from "vitest";
import { encode, FrameDecoder } from "./codec";
import { ProtocolError } from "./errors";
import { mulberry32 } from "./random";
import type { Frame, TokenFrame } from "./messages";
import { concatBytes, DONE, ERROR, fromHex, TOKEN } from "./codec-fixtures";

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

/** Deterministic PRNG (mulberry32) for random chunkings. */

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
