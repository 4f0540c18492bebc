import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeFrame, encode } from "../protocol/codec";
import { MSGPACK_CONTENT_TYPE, SECRET_HEADER, type DoneFrame, type ErrorFrame, type GenerateRequest } from "../protocol/messages";
import { ROUTES } from "../protocol/routes";
import { tinyModelDir } from "../gpu-backend/model/testing/tiny-model";
import { generate, greedy } from "./support/backend-client";
import { startBackend, type BackendProcess } from "./support/backend-process";

/** A real backend process over real HTTP, with a tiny checkpoint through the real loader. */
describe("backend server (real process, msgpack over HTTP)", () => {
  let dir: string;
  let backend: BackendProcess;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "agent-edge-tiny-"));
    const modelDir = await tinyModelDir(dir);
    backend = await startBackend(["--model", modelDir, "--kv-memory", "32MiB", "--threads", "1"]);
  });

  afterAll(async () => {
    await backend?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const request = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
    requestId: "r1",
    trajectoryId: "t1",
    mode: "full",
    messages: [
      { role: "system", content: "You are a test agent. ".repeat(20) },
      { role: "user", content: "List the files." },
    ],
    sampling: greedy(8),
    ...over,
  });

  it("answers /healthz without the secret and refuses other routes without it", async () => {
    expect((await fetch(`${backend.url}/healthz`)).status).toBe(200);
    const res = await fetch(`${backend.url}${ROUTES.backend.metrics}`);
    expect(res.status).toBe(401);
    const frame = decodeFrame(new Uint8Array(await res.arrayBuffer()));
    expect(frame.ok && frame.value.type === "error" && frame.value.code).toBe("unauthorized");
  });

  it("every route but /healthz, by any method, refuses a missing or wrong secret (same length or not) and takes the right one", async () => {
    const secret = backend.secret;
    const sameLength = secret.replace(/.$/, (ch) => (ch === "x" ? "y" : "x"));
    expect(sameLength).toHaveLength(secret.length);
    const wrong = [undefined, sameLength, `${secret}x`, secret.slice(0, -1), "", secret.toUpperCase() === secret ? secret.toLowerCase() : secret.toUpperCase()];
    const paths = Object.values(ROUTES.backend).filter((p) => p !== ROUTES.backend.healthz);
    expect(paths.length).toBeGreaterThan(8);
    // Not msgpack, not JSON: a request past the guard is refused by the route (the drain never starts).
    const body = new Uint8Array([0xc1]);
    for (const path of paths) {
      for (const method of ["GET", "POST"]) {
        const send = (given: string | undefined) =>
          fetch(`${backend.url}${path}`, { method, headers: { "content-type": MSGPACK_CONTENT_TYPE, ...(given === undefined ? {} : { [SECRET_HEADER]: given }) }, ...(method === "POST" ? { body } : {}) });
        for (const given of wrong) {
          const res = await send(given);
          expect(res.status, `${method} ${path} with ${JSON.stringify(given)}`).toBe(401);
          const frame = decodeFrame(new Uint8Array(await res.arrayBuffer()));
          expect(frame.ok && frame.value.type === "error" && frame.value.code).toBe("unauthorized");
        }
        const res = await send(secret);
        expect(res.status, `${method} ${path} with the secret`).not.toBe(401);
        await res.body?.cancel();
      }
    }
    expect((await fetch(`${backend.url}${ROUTES.backend.healthz}`, { headers: { [SECRET_HEADER]: sameLength } })).status).toBe(200);
  });

  it("streams token frames, then a done frame with usage and timings", async () => {
    const { status, frames } = await generate(backend.url, backend.secret, request());
    expect(status).toBe(200);
    const tokens = frames.filter((f) => f.type === "token");
    const done = frames.at(-1) as DoneFrame;
    expect(tokens).toHaveLength(8);
    expect(done.type).toBe("done");
    expect(done.finishReason).toBe("length");
    expect(done.usage.completionTokens).toBe(8);
    expect(done.usage.promptTokens).toBeGreaterThan(50);
    expect(done.usage.cachedTokens + done.usage.computedTokens).toBe(done.usage.promptTokens);
    expect(done.text).toBe(tokens.map((t) => (t.type === "token" ? t.text : "")).join(""));
    expect(done.message).toEqual({ role: "assistant", content: done.text }); // random text: no tool calls
    expect(done.timings.ttftMs).toBeGreaterThan(0);
  });

  it("reuses the cache on a delta turn and on a repeated full turn", async () => {
    const first = (await generate(backend.url, backend.secret, request({ trajectoryId: "t2" }))).frames.at(-1) as DoneFrame;
    const delta = (
      await generate(backend.url, backend.secret, {
        requestId: "r2",
        trajectoryId: "t2",
        mode: "delta",
        stateId: first.stateId,
        messages: [{ role: "user", content: "And now the tests." }],
        sampling: greedy(4),
      })
    ).frames.at(-1) as DoneFrame;
    expect(delta.type).toBe("done");
    // Everything up to the end of the first reply is cached, bar the partial last block.
    const before = first.usage.promptTokens + first.usage.completionTokens;
    expect(delta.usage.cachedTokens).toBeGreaterThanOrEqual(before - 16);
    expect(delta.usage.computedTokens).toBe(delta.usage.promptTokens - delta.usage.cachedTokens);

    const again = (await generate(backend.url, backend.secret, request({ trajectoryId: "t3" }))).frames.at(-1) as DoneFrame;
    expect(again.usage.cachedTokens).toBeGreaterThanOrEqual(first.usage.promptTokens - 16);
  });

  it("answers state_unknown (409) for a delta turn on an unknown state", async () => {
    const { status, frames } = await generate(backend.url, backend.secret, request({ mode: "delta", stateId: "nope" }));
    expect(status).toBe(409);
    expect((frames[0] as ErrorFrame).code).toBe("state_unknown");
  });

  it("rejects malformed msgpack, wrong types and unknown models, and keeps serving", async () => {
    const bad = await generate(backend.url, backend.secret, Uint8Array.of(0xc1, 0x00, 0xff));
    expect(bad.status).toBe(400);
    expect((bad.frames[0] as ErrorFrame).code).toBe("malformed_msgpack");

    const wrongType = await generate(backend.url, backend.secret, encode({ ...request(), sampling: { ...greedy(4), maxTokens: "four" } }));
    expect(wrongType.status).toBe(400);
    expect((wrongType.frames[0] as ErrorFrame).code).toBe("invalid_request");
    expect((wrongType.frames[0] as ErrorFrame).message).toMatch(/maxTokens/);

    const model = await generate(backend.url, backend.secret, request({ model: "no-such-model" }));
    expect(model.status).toBe(404);
    expect((model.frames[0] as ErrorFrame).code).toBe("unknown_model");

    // A prompt that leaves no room for a reply (a max tokens over what the context leaves is clamped instead).
    const tooLong = await generate(backend.url, backend.secret, request({ messages: [{ role: "user", content: "word ".repeat(5000) }] }));
    expect(tooLong.status).toBe(400);
    expect((tooLong.frames[0] as ErrorFrame).code).toBe("context_length_exceeded");

    const ok = await generate(backend.url, backend.secret, request({ trajectoryId: "t4" }));
    expect(ok.frames.at(-1)!.type).toBe("done");
  });

  it("serves concurrent turns and reports Prometheus metrics", async () => {
    const results = await Promise.all(
      [0, 1, 2, 3].map((i) => generate(backend.url, backend.secret, request({ trajectoryId: `c${i}`, messages: [{ role: "user", content: `question ${i}` }] }))),
    );
    for (const r of results) expect(r.frames.at(-1)!.type).toBe("done");
    const metrics = await (await fetch(`${backend.url}${ROUTES.backend.metrics}`, { headers: { [SECRET_HEADER]: backend.secret } })).text();
    expect(metrics).toMatch(/agent_edge_prefix_cache_queried_tokens_total \d+/);
    expect(metrics).toMatch(/agent_edge_prefix_cache_hit_tokens_total [1-9]\d*/);
    expect(metrics).toMatch(/agent_edge_kv_usage_ratio/);
    expect(metrics).toMatch(/agent_edge_running_sequences 0/);
  });

  it("releases a state", async () => {
    const first = (await generate(backend.url, backend.secret, request({ trajectoryId: "t5" }))).frames.at(-1) as DoneFrame;
    const res = await fetch(`${backend.url}${ROUTES.backend.releaseState}`, {
      method: "POST",
      headers: { "content-type": MSGPACK_CONTENT_TYPE, [SECRET_HEADER]: backend.secret },
      body: encode({ stateId: first.stateId }),
    });
    expect(res.status).toBe(200);
    const delta = await generate(backend.url, backend.secret, request({ mode: "delta", stateId: first.stateId, messages: [{ role: "user", content: "x" }] }));
    expect(delta.status).toBe(409);
  });
});
