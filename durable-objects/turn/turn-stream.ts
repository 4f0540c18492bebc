import type { TurnEvent } from "./turn-types";

/**
 * The two ends of a turn's event stream from a trajectory object to the Worker (the `turn` RPC's
 * byte stream): one JSON `TurnEvent` per line. Only these two functions read or write it.
 */
const encoder = new TextEncoder();

/** One event as the stream carries it. */
export function encodeTurnEvent(event: TurnEvent): Uint8Array {
  return encoder.encode(`${JSON.stringify(event)}\n`);
}

/**
 * A trajectory object's turn stream (`encodeTurnEvent`) as events, as they arrive.
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
