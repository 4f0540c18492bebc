import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { SOCKET_LIFETIME_MS, type SocketAttachment } from "../../durable-objects/trajectory/responses-socket";
import { trajectoryStub } from "../../durable-objects/trajectory/trajectory-do";
import { parseResponseId } from "../../src/http/response-id";
import { call, expectError, getState, uid, uniqueSystem } from "./helpers";
import { TENANTS } from "./tenants";

/**
 * The Responses API over a WebSocket (docs/responses-api.md, "WebSocket"), through the real
 * Worker, trajectory objects and backend: the Workers runtime's own WebSocket client, on the
 * socket the edge answers `GET /v1/responses` with `Upgrade: websocket`.
 */

interface Event {
  type: string;
  sequence_number?: number;
  response?: { id: string; status: string; usage: { input_tokens: number; input_tokens_details: { cached_tokens: number } } | null };
  status?: number;
  error?: { type: string; code: string; message: string };
}

const SMALL = { max_output_tokens: 3, temperature: 0 };
const ANSWERED = new Set(["response.completed", "response.incomplete"]);
const DONE = new Set([...ANSWERED, "error"]);

/** An open socket and every event it received. */
async function connect(headers: Record<string, string> = {}) {
  const res = await call("/v1/responses", { headers: { upgrade: "websocket", ...headers } });
  expect(res.status, res.status === 101 ? "" : await res.text()).toBe(101);
  const ws = res.webSocket!;
  ws.accept();
  const events: Event[] = [];
  let closed: { code: number } | undefined;
  ws.addEventListener("message", (e) => {
    events.push(JSON.parse(e.data as string) as Event);
  });
  ws.addEventListener("close", (e) => {
    closed = { code: e.code };
  });
  const send = (event: Record<string, unknown>) => ws.send(JSON.stringify(event));
  /** Waits until `n` responses ended (completed, incomplete or an error event) and answers the events so far. */
  const ended = async (n: number): Promise<Event[]> => {
    for (let waited = 0; events.filter((e) => DONE.has(e.type)).length < n; waited += 20) {
      if (waited > 60_000) throw new Error(`timed out: ${JSON.stringify(events.map((e) => e.type))}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return [...events];
  };
  return { ws, events, send, ended, closed: () => closed, trajectory: res.headers.get("x-trajectory-id") };
}

/** Consecutive repeats collapsed (the number of text deltas is the model's, not the transport's). */
const shape = (types: string[]) => types.filter((t, i) => t !== types[i - 1]);

describe("Responses API over a WebSocket", () => {
  it("keeps a chain's additional_tools items (Codex declares its tools once, then sends only new items): turn 2 is a delta with the same tools", async () => {
    const instructions = uniqueSystem().content!;
    const tools = { type: "additional_tools", tools: [{ type: "function", name: "read_file", description: "Read a file.", parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] } }] };
    const socket = await connect();
    socket.send({ type: "response.create", instructions, input: [tools, { role: "user", content: "Read a.txt." }], ...SMALL });
    const turn1 = await socket.ended(1);
    expect(ANSWERED.has(turn1.at(-1)!.type), JSON.stringify(turn1.at(-1))).toBe(true);
    socket.send({ type: "response.create", instructions, previous_response_id: turn1.at(-1)!.response!.id, input: [{ role: "user", content: "Go on." }], ...SMALL });
    const turn2 = (await socket.ended(2)).slice(turn1.length);
    expect(ANSWERED.has(turn2.at(-1)!.type), JSON.stringify(turn2.at(-1))).toBe(true);
    const state = await getState("a", socket.trajectory!);
    // Without the chain's tools turn 2 would be full (tools-changed: [] after [read_file]).
    expect(state.turns.map((t) => t.mode), JSON.stringify(state.turns.map((t) => t.prefix_break))).toEqual(["full", "delta"]);
    socket.ws.close();
  });

  it("chains two turns on one connection with previous_response_id and only the new input: turn 2 is a delta; the events are the SSE stream's", async () => {
    const instructions = uniqueSystem().content!;
    const first = { instructions, input: "Say hi.", ...SMALL };
    const socket = await connect();
    socket.send({ type: "response.create", ...first });
    const turn1 = await socket.ended(1);
    const id1 = turn1.at(-1)!.response!.id;
    expect(ANSWERED.has(turn1.at(-1)!.type), JSON.stringify(turn1.at(-1))).toBe(true);
    expect(turn1.map((e) => e.sequence_number)).toEqual(turn1.map((_, i) => i));
    // Instructions are not inherited (as at OpenAI): each message sends them.
    socket.send({ type: "response.create", instructions, previous_response_id: id1, input: [{ role: "user", content: "And now?" }], ...SMALL });
    const all = await socket.ended(2);
    const turn2 = all.slice(turn1.length);
    expect(ANSWERED.has(turn2.at(-1)!.type), JSON.stringify(turn2.at(-1))).toBe(true);
    const id2 = turn2.at(-1)!.response!.id;
    // One trajectory, the connection's: turn 2 continued it as a delta turn.
    const trajectory = parseResponseId(id1).trajectoryId;
    expect(parseResponseId(id2).trajectoryId).toBe(trajectory);
    expect(trajectory).toMatch(/^resp_/);
    expect(socket.trajectory).toBe(trajectory);
    const state = await getState("a", trajectory);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta"]);
    expect(turn2.at(-1)!.response!.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(0);

    // The same request as a POST's SSE stream: the same events in the same order.
    const res = await call("/v1/responses", { method: "POST", body: { ...first, stream: true }, headers: { "x-trajectory-id": uid("ws-sse") } });
    const sse = (await res.text())
      .trim()
      .split("\n\n")
      .map((block) => (JSON.parse(block.split("\n")[1]!.slice("data: ".length)) as Event).type);
    expect(shape(turn1.map((e) => e.type))).toEqual(shape(sse));
    socket.ws.close();
  });

  it("refuses a second response.create while one is in flight (response_already_in_flight), losing nothing; a resend replays instead of running twice", async () => {
    const id = uid("ws-busy");
    const socket = await connect({ "x-trajectory-id": id });
    const instructions = uniqueSystem().content!;
    const first = { type: "response.create", instructions, input: "Count to ten.", max_output_tokens: 16, temperature: 0 };
    socket.send(first);
    socket.send({ type: "response.create", input: "Meanwhile, this.", ...SMALL });
    const events = await socket.ended(2);
    const refused = events.find((e) => e.type === "error")!;
    expect(refused, JSON.stringify(events.map((e) => e.type))).toMatchObject({ status: 409, error: { type: "conflict_error", code: "response_already_in_flight" } });
    const done = events.filter((e) => ANSWERED.has(e.type));
    expect(done).toHaveLength(1);
    const id1 = done[0]!.response!.id;
    expect((await getState("a", id)).turns).toHaveLength(1);

    // The same message again (a client unsure it arrived): the stored turn, not a second one.
    socket.send(first);
    const again = (await socket.ended(3)).at(-1)!;
    expect(again.response!.id).toBe(id1);
    // A continuation resent after its turn was stored, on a new connection: replayed, not forked.
    const next = { type: "response.create", instructions, previous_response_id: id1, input: [{ role: "user", content: "Go on." }], ...SMALL };
    socket.send(next);
    const id2 = (await socket.ended(4)).at(-1)!.response!.id;
    socket.ws.close();
    const reconnected = await connect({ "x-trajectory-id": id });
    reconnected.send(next);
    const replayed = (await reconnected.ended(1)).at(-1)!;
    expect(replayed.response?.id, JSON.stringify(replayed)).toBe(id2);
    const state = await getState("a", id);
    expect(state.turns).toHaveLength(2);
    expect(state.forks).toEqual([]);
    reconnected.ws.close();
  });

  it("a warmup (generate: false, with or without input) runs no turn; the turn chaining from it runs its input once; store: false chains on; response.processed is ignored", async () => {
    const id = uid("ws-warm");
    const socket = await connect({ "x-trajectory-id": id });
    const instructions = uniqueSystem().content!;
    socket.send({ type: "response.create", instructions, input: [{ role: "user", content: "Say hi." }], store: false, generate: false, ...SMALL });
    const warm = await socket.ended(1);
    expect(warm.map((e) => e.type)).toEqual(["response.created", "response.in_progress", "response.completed"]);
    const warmId = warm.at(-1)!.response!.id;
    expect((await call(`/v1/tenants/${TENANTS.a.name}/trajectories/${id}`)).status).toBe(404);
    socket.send({ type: "response.processed", response_id: warmId });
    socket.send({ type: "response.create", instructions, previous_response_id: warmId, input: [], store: false, ...SMALL });
    const turn1 = (await socket.ended(2)).at(-1)!;
    expect(ANSWERED.has(turn1.type), JSON.stringify(turn1)).toBe(true);
    socket.send({ type: "response.create", instructions, previous_response_id: turn1.response!.id, input: [{ role: "user", content: "More." }], store: false, ...SMALL });
    const turn2 = (await socket.ended(3)).at(-1)!;
    expect(ANSWERED.has(turn2.type), JSON.stringify(turn2)).toBe(true);
    const state = await getState("a", id);
    expect(state.turns.map((t) => t.mode)).toEqual(["full", "delta"]);
    // instructions, "Say hi.", reply, "More.", reply: the warmup added nothing.
    expect(state.message_count).toBe(5);

    // Codex's order: a warmup with no input yet, then the whole input chained from it.
    socket.send({ type: "response.create", instructions, input: [], store: false, generate: false, ...SMALL });
    const codexWarm = (await socket.ended(4)).at(-1)!;
    expect(codexWarm.type, JSON.stringify(codexWarm)).toBe("response.completed");
    const whole = [{ role: "user", content: "Say hi." }, { role: "assistant", content: "Hi." }, { role: "user", content: "Again." }];
    socket.send({ type: "response.create", instructions, previous_response_id: codexWarm.response!.id, input: whole, store: false, ...SMALL });
    const turn3 = (await socket.ended(5)).at(-1)!;
    expect(ANSWERED.has(turn3.type), JSON.stringify(turn3)).toBe(true);
    expect((await getState("a", id)).turns).toHaveLength(3);
    socket.ws.close();
  });

  it("is refused before the upgrade without a valid key; a GET without the upgrade is 426 upgrade_required", async () => {
    const upgrade = { upgrade: "websocket", connection: "Upgrade", "openai-beta": "responses_websockets=2026-02-06" };
    await expectError(await call("/v1/responses", { headers: upgrade, tenant: null }), 401, "unauthorized");
    await expectError(await call("/v1/responses", { headers: upgrade, authorization: "Bearer sk-wrong" }), 401, "unauthorized");
    await expectError(await call("/v1/responses"), 426, "upgrade_required");
    // Session headers past what the socket's attachment holds: refused before the upgrade too.
    await expectError(await call("/v1/responses", { headers: { ...upgrade, "session-id": "s".repeat(1100) } }), 400, "invalid_request");
  });

  it("keeps the connection's state in the socket's attachment (hibernation-safe); past its lifetime a message gets websocket_connection_limit_reached and a close", async () => {
    const id = uid("ws-attach");
    const socket = await connect({ "x-trajectory-id": id });
    const stub = trajectoryStub(env, TENANTS.a.name, id);
    const attachments = await runInDurableObject(stub, (_obj, state) => state.getWebSockets().map((ws) => ws.deserializeAttachment() as SocketAttachment));
    expect(attachments).toEqual([{ tenant: TENANTS.a.name, trajectoryId: id, headers: { "x-trajectory-id": id }, openedAt: expect.any(Number) }]);

    // Malformed messages: the documented error event, and the connection stays usable.
    socket.ws.send("{not json");
    socket.send({ type: "response.cancel" });
    socket.send({ type: "response.create", previous_response_id: "resp_nope", input: "x", ...SMALL });
    const errors = await socket.ended(3);
    expect(errors.map((e) => [e.type, e.status, e.error?.code])).toEqual([
      ["error", 400, "invalid_request"],
      ["error", 400, "invalid_request"],
      ["error", 404, "not_found"],
    ]);

    await runInDurableObject(stub, (_obj, state) => {
      for (const ws of state.getWebSockets()) {
        const a = ws.deserializeAttachment() as SocketAttachment;
        ws.serializeAttachment({ ...a, openedAt: a.openedAt - SOCKET_LIFETIME_MS });
      }
    });
    socket.send({ type: "response.create", input: "Late.", ...SMALL });
    const late = (await socket.ended(4)).at(-1)!;
    expect(late).toMatchObject({ type: "error", status: 400, error: { code: "websocket_connection_limit_reached" } });
    for (let waited = 0; socket.closed() === undefined && waited < 5000; waited += 20) await new Promise((r) => setTimeout(r, 20));
    expect(socket.closed()?.code).toBe(1000);
    expect((await call(`/v1/tenants/${TENANTS.a.name}/trajectories/${id}`)).status).toBe(404);
  });
});
