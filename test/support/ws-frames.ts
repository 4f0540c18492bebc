/**
 * A reader of one direction of a WebSocket connection's bytes (RFC 6455 frames, uncompressed):
 * feed it chunks as they pass; it calls `onText` with each whole text message (fragments joined,
 * client masks removed). Control frames, binary messages and anything after a close are skipped.
 * With `head: true` the bytes start with the server's HTTP answer (`HTTP/1.1 101 ...` and its
 * headers), handed to `onHead` first.
 *
 * For the recording proxy (cli-clients.ts), which reads a Responses WebSocket's messages as they
 * pass without being a party to it.
 *
 * @example upstream.on("data", textMessages((text) => console.log(JSON.parse(text).type), { head: true }));
 */
export function textMessages(onText: (text: string) => void, options: { head?: boolean; onHead?: (head: string) => void } = {}): (chunk: Buffer) => void {
  let pending = Buffer.alloc(0);
  let inHead = options.head === true;
  let parts: Buffer[] = [];
  let text = false;
  let closed = false;
  return (chunk) => {
    if (closed) return;
    pending = Buffer.concat([pending, chunk]);
    if (inHead) {
      const end = pending.indexOf("\r\n\r\n");
      if (end < 0) return;
      options.onHead?.(pending.subarray(0, end).toString("latin1"));
      pending = pending.subarray(end + 4);
      inHead = false;
    }
    for (;;) {
      if (pending.length < 2) return;
      const fin = (pending[0]! & 0x80) !== 0;
      const opcode = pending[0]! & 0x0f;
      const masked = (pending[1]! & 0x80) !== 0;
      let length = pending[1]! & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (pending.length < 4) return;
        length = pending.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (pending.length < 10) return;
        length = Number(pending.readBigUInt64BE(2));
        offset = 10;
      }
      const mask = masked ? pending.subarray(offset, offset + 4) : undefined;
      if (masked) offset += 4;
      if (pending.length < offset + length) return;
      const payload = Buffer.from(pending.subarray(offset, offset + length));
      pending = pending.subarray(offset + length);
      if (mask) for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i % 4]!;
      if (opcode === 0x8) {
        closed = true;
        return;
      }
      if (opcode >= 0x8) continue;
      if (opcode !== 0x0) {
        text = opcode === 0x1;
        parts = [];
      }
      if (text) parts.push(payload);
      if (fin && text) {
        onText(Buffer.concat(parts).toString("utf8"));
        parts = [];
      }
    }
  };
}
