import type { TurnEvent } from "./turn-types";

/**
 * A trajectory object's turn answer (NDJSON, one `TurnEvent` per line) as events, as they arrive.
 *
 * @example for await (const event of turnEvents(res.body)) ...
 */
export async function* turnEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<TurnEvent> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += value;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line.trim()) yield JSON.parse(line) as TurnEvent;
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}
