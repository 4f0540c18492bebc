import { FrameDecoder, encode } from "../../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type Frame, type GenerateRequest } from "../../protocol/messages";
import { ROUTES } from "../../protocol/routes";

/** POSTs a generate request and collects every frame of the streamed answer. */
export async function generate(url: string, secret: string, req: GenerateRequest | Uint8Array): Promise<{ status: number; frames: Frame[] }> {
  const res = await fetch(`${url}${ROUTES.backend.generate}`, {
    method: "POST",
    headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: secret },
    body: req instanceof Uint8Array ? req : encode(req),
  });
  const decoder = new FrameDecoder();
  const frames: Frame[] = [];
  const reader = res.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    frames.push(...decoder.push(value));
  }
  decoder.end();
  return { status: res.status, frames };
}

export function greedy(maxTokens: number): GenerateRequest["sampling"] {
  return { maxTokens, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [], ignoreEos: true };
}
