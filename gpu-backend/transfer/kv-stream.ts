import { crc32 } from "node:zlib";
import { decodeKvStreamHeader, encode } from "../../protocol/codec";
import type { KvStreamHeader } from "../../protocol/messages";

/**
 * The body of a `POST /v1/kv/pull` answer: whole KV blocks, each checked on arrival.
 *
 *   "AEKV" | u32 LE header length | header (msgpack {@link KvStreamHeader})
 *   then `header.blocks` frames: u32 LE CRC-32 of the payload | payload (`bytesPerBlock` bytes)
 *
 * Blocks come in chain order from the requested block; a receiver keeps every block whose
 * checksum matched before a broken stream or a mismatch, and computes the rest.
 */
export type { KvStreamHeader };
const MAGIC = new Uint8Array([0x41, 0x45, 0x4b, 0x56]); // "AEKV"

/** The stream's opening bytes. @example controller.enqueue(encodeStreamHeader({ format, bytesPerBlock, blocks: 3 })) */
export function encodeStreamHeader(header: KvStreamHeader): Uint8Array {
  const body = encode(header);
  const out = new Uint8Array(8 + body.length);
  out.set(MAGIC, 0);
  new DataView(out.buffer).setUint32(4, body.length, true);
  out.set(body, 8);
  return out;
}

/** One block's frame: its checksum, then the payload (copied). @example controller.enqueue(encodeBlockFrame(bytes)) */
export function encodeBlockFrame(payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(4 + payload.length);
  new DataView(out.buffer).setUint32(0, blockChecksum(payload), true);
  out.set(payload, 4);
  return out;
}

/** CRC-32 (zlib's) of a block's bytes. */
export function blockChecksum(payload: Uint8Array): number {
  return crc32(payload) >>> 0;
}

/**
 * Reads a KV stream: `header()` once, then `block()` per block. Each read waits for exactly the
 * bytes it needs; a stream that ends early throws.
 *
 * @example
 * const r = new KvStreamReader(res.body!.getReader());
 * const { blocks } = await r.header();
 * const { payload, ok } = await r.block(bytesPerBlock);
 */
export class KvStreamReader {
  private chunks: Uint8Array[] = [];
  private buffered = 0;

  constructor(private readonly reader: ReadableStreamDefaultReader<Uint8Array>) {}

  async header(): Promise<KvStreamHeader> {
    const head = await this.take(8);
    for (let i = 0; i < 4; i++) if (head[i] !== MAGIC[i]) throw new Error("not a KV stream (bad magic)");
    const length = new DataView(head.buffer, head.byteOffset, 8).getUint32(4, true);
    if (length > 64 * 1024) throw new Error(`KV stream header of ${length} bytes is too long`);
    const h = decodeKvStreamHeader(await this.take(length));
    if (!h.ok) throw h.error;
    return h.value;
  }

  /** The next block: its payload and whether its checksum matches. */
  async block(bytesPerBlock: number): Promise<{ payload: Uint8Array; ok: boolean }> {
    const frame = await this.take(4 + bytesPerBlock);
    const sum = new DataView(frame.buffer, frame.byteOffset, 4).getUint32(0, true);
    const payload = frame.subarray(4);
    return { payload, ok: blockChecksum(payload) === sum };
  }

  cancel(): void {
    void this.reader.cancel().catch(() => {});
  }

  /** Exactly `n` bytes, in a fresh 8-byte-aligned buffer. */
  private async take(n: number): Promise<Uint8Array> {
    while (this.buffered < n) {
      const { value, done } = await this.reader.read();
      if (done) throw new Error(`the KV stream ended ${n - this.buffered} bytes short`);
      if (value.length > 0) {
        this.chunks.push(value);
        this.buffered += value.length;
      }
    }
    const out = new Uint8Array(n);
    let at = 0;
    while (at < n) {
      const c = this.chunks[0]!;
      const k = Math.min(c.length, n - at);
      out.set(c.subarray(0, k), at);
      at += k;
      if (k === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(k);
    }
    this.buffered -= n;
    return out;
  }
}
