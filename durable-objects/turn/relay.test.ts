import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeGenerateRequest, encode } from "../../protocol/codec";
import type { DoneFrame, ErrorFrame, Frame, GenerateRequest } from "../../protocol/messages";
import type { RoutedBackend } from "../routing/placement";
import { relayTurn, turnRecord, type RelayParams } from "./relay";
import type { TurnEvent } from "./turn-types";

/**
 * The one relay against real HTTP peers speaking the backend protocol: a scripted backend (node:http,
 * msgpack frames) and a port where nothing listens.
 */
const done: DoneFrame = {
  type: "done",
  message: { role: "assistant", content: "hi" },
  text: "hi",
  finishReason: "stop",
  stateId: "st-1",
  usage: { promptTokens: 10, cachedTokens: 4, computedTokens: 6, completionTokens: 2 },
  timings: { queueMs: 0, prefillMs: 2, ttftMs: 3, decodeMs: 2, totalMs: 5 },
  backendId: "scripted",
};

/** What the scripted backend answers, per request mode: frames, or one error frame with a status. */
type Script = (req: GenerateRequest, url: string) => { status: number; frames: Frame[]; cutAfterFirst?: boolean };

let server: Server;
let twin: Server;
let url = "";
/** A second address of the same scripted backend (another backend as the relay sees it). */
let twinUrl = "";
let deadUrl = "";
let script: Script = () => ({ status: 200, frames: [] });
const seen: GenerateRequest["mode"][] = [];

beforeAll(async () => {
  const handler: Parameters<typeof createServer>[1] = (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const decoded = decodeGenerateRequest(new Uint8Array(Buffer.concat(chunks)));
      if (!decoded.ok) throw decoded.error;
      seen.push(decoded.value.mode);
      const answer = script(decoded.value, `http://127.0.0.1:${req.socket.localPort}`);
      res.writeHead(answer.status, { "content-type": "application/msgpack" });
      if (answer.cutAfterFirst) {
        res.write(encode(answer.frames[0]));
        setTimeout(() => res.destroy(), 20);
        return;
      }
      for (const f of answer.frames) res.write(encode(f));
      res.end();
    });
  };
  server = createServer(handler);
  twin = createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  await new Promise<void>((r) => twin.listen(0, "127.0.0.1", r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  twinUrl = `http://127.0.0.1:${(twin.address() as AddressInfo).port}`;
  const closed = createServer();
  await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
  deadUrl = `http://127.0.0.1:${(closed.address() as AddressInfo).port}`;
  await new Promise<void>((r) => closed.close(() => r()));
});

afterAll(async () => {
  await new Promise<void>((r) => server.close(() => r()));
  await new Promise<void>((r) => twin.close(() => r()));
});

const backend = (u: string, load = 0): RoutedBackend => ({ url: u, secret: "s", up: true, load });

function params(over: Partial<RelayParams>, events: TurnEvent[]): RelayParams {
  return {
    backend: backend(url),
    backends: [backend(url)],
    trajectoryId: "t",
    mode: "full",
    fullReason: "first-turn",
    route: "prefix",
    request: (mode) => ({ requestId: "r", cacheSalt: "salt", mode, messages: [{ role: "user", content: "x" }], sampling: { maxTokens: 2, temperature: 0, topP: 1, topK: 0, stop: [], stopTokenIds: [] }, ...(mode === "delta" ? { stateId: "old" } : {}) }),
    timeoutMs: 5000,
    emit: async (e) => {
      events.push(e);
      return true;
    },
    signal: new AbortController().signal,
    ...over,
  };
}

describe("relayTurn", () => {
  it("relays tokens as they arrive and returns the done frame with a turn record", async () => {
    script = () => ({ status: 200, frames: [{ type: "token", tokenIds: [1], text: "h" }, { type: "token", tokenIds: [2], text: "i" }, done] });
    const events: TurnEvent[] = [];
    const r = await relayTurn(params({}, events));
    expect(events).toEqual([
      { type: "token", text: "h" },
      { type: "token", text: "i" },
    ]);
    expect(r).toMatchObject({ mode: "full", fullReason: "first-turn", route: "prefix", backend: { url } });
    expect(r.requestBytes).toBeGreaterThan(0);
    expect(turnRecord(r, { turn: 3 })).toMatchObject({ turn: 3, mode: "full", cachedTokens: 4, computedTokens: 6, backend: "scripted", backendUrl: url, route: "prefix" });
    // The record keeps a speculating turn's accepted/drafted (the inspector's drafts column), and has none otherwise.
    expect(turnRecord(r, { turn: 3 }).speculation).toBeUndefined();
    expect(turnRecord({ ...r, done: { ...r.done, speculation: { drafted: 8, accepted: 5 } } }, { turn: 3 }).speculation).toEqual({ drafted: 8, accepted: 5 });
  });

  it("relays a token frame's reply pieces, also on a frame without text", async () => {
    const open = { toolCalls: [{ index: 0, id: "call_x", name: "ls" }] };
    script = () => ({ status: 200, frames: [{ type: "token", tokenIds: [1], text: "<tool_call>", reply: {} }, { type: "token", tokenIds: [2], text: "", reply: open }, { type: "token", tokenIds: [3], text: "{}", reply: { toolCalls: [{ index: 0, arguments: "{}" }] } }, done] });
    const events: TurnEvent[] = [];
    await relayTurn(params({}, events));
    expect(events).toEqual([
      { type: "token", text: "<tool_call>", reply: {} },
      { type: "token", text: "", reply: open },
      { type: "token", text: "{}", reply: { toolCalls: [{ index: 0, arguments: "{}" }] } },
    ]);
  });

  it("resends a delta turn in full when the backend lost its state", async () => {
    seen.length = 0;
    const unknown: ErrorFrame = { type: "error", code: "state_unknown", message: "no such state", retryable: false };
    script = (req) => (req.mode === "delta" ? { status: 404, frames: [unknown] } : { status: 200, frames: [done] });
    const r = await relayTurn(params({ mode: "delta", fullReason: null }, []));
    expect(seen).toEqual(["delta", "full"]);
    expect(r).toMatchObject({ mode: "full", fullReason: "state-unknown" });
  });

  it("fails over to another up backend, in full, when the first is gone before answering", async () => {
    script = () => ({ status: 200, frames: [done] });
    const r = await relayTurn(params({ backend: backend(deadUrl), backends: [backend(deadUrl), backend(url, 5)], mode: "delta", fullReason: null }, []));
    expect(r).toMatchObject({ mode: "full", fullReason: "failover", route: "failover", backend: { url } });
  });

  it("answers a retryable error, without failing over, when the backend dies after tokens went out", async () => {
    // The first answer breaks after one token; a second backend would answer in full.
    let calls = 0;
    script = () => (calls++ === 0 ? { status: 200, frames: [{ type: "token", tokenIds: [1], text: "h" }], cutAfterFirst: true } : { status: 200, frames: [done] });
    const events: TurnEvent[] = [];
    await expect(relayTurn(params({ backends: [backend(url), backend(twinUrl)] }, events))).rejects.toMatchObject({ code: "backend_unavailable", retryable: true });
    expect(events).toEqual([{ type: "token", text: "h" }]);
    expect(calls).toBe(1);
  });

  it("moves a turn a backend refuses as overloaded (429) to the least loaded other backend, in full", async () => {
    const busy: ErrorFrame = { type: "error", code: "overloaded", message: "queue full", retryable: true };
    const asked: string[] = [];
    script = (_req, at) => {
      asked.push(at);
      return at === url ? { status: 429, frames: [busy] } : { status: 200, frames: [done] };
    };
    const r = await relayTurn(params({ backends: [backend(url), backend(twinUrl, 3)], mode: "delta", fullReason: null }, []));
    expect(asked).toEqual([url, twinUrl]);
    expect(r).toMatchObject({ mode: "full", fullReason: "failover", route: "failover", backend: { url: twinUrl } });
  });

  it("answers overloaded (retryable, 429) when every backend refused, asking each once", async () => {
    const busy: ErrorFrame = { type: "error", code: "overloaded", message: "queue full", retryable: true };
    const asked: string[] = [];
    script = (_req, at) => {
      asked.push(at);
      return { status: 429, frames: [busy] };
    };
    await expect(relayTurn(params({ backends: [backend(url), backend(twinUrl)] }, []))).rejects.toMatchObject({ code: "overloaded", retryable: true, httpStatus: 429 });
    expect(asked.sort()).toEqual([url, twinUrl].sort());
  });

  it("carries the soonest of the refusals' retryAfterS estimates when every backend refused (the 429's Retry-After)", async () => {
    script = (_req, at) => ({ status: 429, frames: [{ type: "error", code: "overloaded", message: "queue full", retryable: true, retryAfterS: at === url ? 9 : 4 }] });
    await expect(relayTurn(params({ backends: [backend(url), backend(twinUrl)] }, []))).rejects.toMatchObject({ code: "overloaded", retryAfterS: 4 });
    // One backend: its own estimate, through the frame.
    script = () => ({ status: 429, frames: [{ type: "error", code: "overloaded", message: "queue full", retryable: true, retryAfterS: 9 }] });
    await expect(relayTurn(params({}, []))).rejects.toMatchObject({ code: "overloaded", retryAfterS: 9 });
  });

  it("fails over past a backend whose prefill queue is long, to one with a short queue", async () => {
    const asked: string[] = [];
    script = (_req, at) => {
      asked.push(at);
      return { status: 200, frames: [done] };
    };
    // deadUrl fails; of the rest, the twin runs fewer sequences but has 20 s of prefill queued.
    const r = await relayTurn(params({ backend: backend(deadUrl), backends: [backend(deadUrl), { ...backend(twinUrl, 0), queueS: 20 }, backend(url, 2)] }, []));
    expect(r).toMatchObject({ route: "failover", backend: { url } });
    expect(asked).toEqual([url]);
  });
});
