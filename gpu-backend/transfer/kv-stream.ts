import { crc32 } from "node:zlib";
import { decodeKvStreamHeader, encode } from "../../protocol/codec";
import type { KvStreamHeader } from "../../protocol/messages";
import type { BlockIO } from "../model/executors/executor";

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

/**
 * Frames of consecutive blocks in one chunk: per block its checksum, then its bytes, as `io.read`
 * writes them into the chunk (no intermediate copy; the chunk is not zero-filled first). The
 * checksums are taken once `io.settled()` says the reads have landed (a device pool's reads are
 * queued behind its steps: `BlockIO`).
 *
 * @example controller.enqueue(await encodeBlockFrames(ids, io))
 */
export async function encodeBlockFrames(blockIds: readonly number[], io: Pick<BlockIO, "bytesPerBlock" | "read" | "settled">): Promise<Uint8Array> {
  const { bytesPerBlock } = io;
  const chunk = Buffer.allocUnsafe(blockIds.length * (4 + bytesPerBlock));
  const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  // A chunk this large is its own ArrayBuffer (offset 0), and bytesPerBlock is a multiple of 4: every payload is 4-byte aligned for typed views.
  const payload = (i: number) => chunk.subarray(i * (4 + bytesPerBlock) + 4, (i + 1) * (4 + bytesPerBlock));
  blockIds.forEach((id, i) => io.read(id, payload(i)));
  await io.settled();
  for (let i = 0; i < blockIds.length; i++) view.setUint32(i * (4 + bytesPerBlock), blockChecksum(payload(i)), true);
  return chunk;
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
  private frame: Uint8Array | undefined;

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

  /** The next block: its payload (valid until the next call: the buffer is reused) and whether its checksum matches. */
  async block(bytesPerBlock: number): Promise<{ payload: Uint8Array; ok: boolean }> {
    this.frame ??= new Uint8Array(8 + bytesPerBlock);
    // The checksum at offset 4, the payload at 8: an 8-byte-aligned payload for typed-array views.
    await this.takeInto(this.frame.subarray(4, 8 + bytesPerBlock));
    const sum = new DataView(this.frame.buffer, 4, 4).getUint32(0, true);
    const payload = this.frame.subarray(8, 8 + bytesPerBlock);
    return { payload, ok: blockChecksum(payload) === sum };
  }

  cancel(): void {
    void this.reader.cancel().catch(() => {});
  }

  /** Exactly `n` bytes, in a fresh buffer. */
  private async take(n: number): Promise<Uint8Array> {
    const out = new Uint8Array(n);
    await this.takeInto(out);
    return out;
  }

  /** Fills `out` with the next `out.length` bytes. */
  private async takeInto(out: Uint8Array): Promise<void> {
    const n = out.length;
    while (this.buffered < n) {
      const { value, done } = await this.reader.read();
      if (done) throw new Error(`the KV stream ended ${n - this.buffered} bytes short`);
      if (value.length > 0) {
        this.chunks.push(value);
        this.buffered += value.length;
      }
    }
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
  }
}
