/**
 * The JSON payloads of a server-sent event stream as the edge writes it (`data: {...}` lines,
 * ending with `data: [DONE]`), parsed as they arrive.
 *
 * @example for await (const chunk of sseJson(res.body)) handle(chunk);
 */
export async function* sseJson(body: ReadableStream<Uint8Array<ArrayBuffer>>): AsyncGenerator<unknown> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    pending += value;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) {
      if (line.startsWith("data: ") && line !== "data: [DONE]") yield JSON.parse(line.slice(6));
    }
  }
}
