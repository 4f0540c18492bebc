import { ProtocolError, toProtocolError } from "../../protocol/errors";
import { sha256Hex } from "../../protocol/hex";

/**
 * How long a Responses WebSocket lives (OpenAI's limit too): a `response.create` after it gets
 * `websocket_connection_limit_reached` and the socket is closed; the client opens a new one and
 * goes on with `previous_response_id` (stored responses outlive connections).
 */
export const SOCKET_LIFETIME_MS = 60 * 60 * 1000;

/** What a socket keeps across hibernation: its attachment (`serializeAttachment`, at most 2 KiB). */
export interface SocketAttachment {
  tenant: string;
  /** The trajectory this object is (the connection's: its turns run here unless `previous_response_id` names another). */
  trajectoryId: string;
  /** The upgrade request's naming headers (`SESSION_HEADERS`; `x-trajectory-id` when none named one), sent with every turn. */
  headers: Record<string, string>;
  /** Unix milliseconds. */
  openedAt: number;
  /** The ids of this connection's warmups (`generate: false`), whose bodies wait in storage (the last WARMUPS_KEPT). */
  warmups?: string[];
  /**
   * This connection's last WARMUPS_KEPT responses that had `additional_tools` items in effect, with
   * the hash their items are stored under (one copy per distinct list: a chain keeps its tools).
   */
  toolChains?: { id: string; hash: string }[];
}

/** How many warmups a connection keeps (Codex sends one per turn of its own, then chains from it). */
const WARMUPS_KEPT = 4;

/** One `response.create`, as the Worker's Responses route runs it. */
export interface SocketTurn {
  tenant: string;
  /** The connection's naming headers and the turn's `idempotency-key`. */
  headers: Record<string, string>;
  /** The Responses request body (the event without its envelope fields). */
  body: Record<string, unknown>;
}

/**
 * What the Worker lends the object (injected, since durable-objects/ must not import src/): its
 * own Responses route, answering a turn as the SSE stream a POST gets, and its error shape.
 */
export interface SocketResponder {
  run(turn: SocketTurn, signal: AbortSignal): Promise<Response>;
  /** A warmup's events (`response.created`, `response.completed` with no output): the body checked, no turn run. */
  warm(turn: SocketTurn): Promise<object[]>;
  /** OpenAI's error body (`{ error: { type, code, message, param } }`). */
  errorBody(err: ProtocolError): object;
  /** Most bytes of one message (MAX_BODY_BYTES, as a POST body). */
  maxMessageBytes(): number;
}

/** The header that carries a forwarded upgrade's `SocketAttachment` (the Worker -> this object only). */
const SOCKET_HEADER = "x-agent-edge-socket";

/**
 * The request the Worker forwards an authenticated upgrade as, to the object of `trajectoryId`.
 *
 * @example return trajectoryStub(env, tenant, id).fetch(socketUpgrade(c.req.raw, { tenant, trajectoryId: id, headers }));
 */
export function socketUpgrade(upgrade: Request, socket: Omit<SocketAttachment, "openedAt">): Request {
  const headers = new Headers(upgrade.headers);
  headers.set(SOCKET_HEADER, JSON.stringify(socket));
  return new Request(upgrade.url, { method: "GET", headers });
}

/**
 * The Responses API's WebSocket transport, terminated in the trajectory's object with the
 * hibernation API: each `response.create` message is one turn, run by the Worker's own Responses
 * route (`SocketResponder.run`: the same parsing, naming and SSE shaping as a POST) and answered
 * as that stream's events, one JSON message each. Connection-level failures are OpenAI's `error`
 * event, `{ type: "error", status, error: { type, code, message, param } }`.
 *
 * - One response in flight per connection: a second `response.create` meanwhile gets
 *   `response_already_in_flight` (409) and changes nothing; the running one goes on.
 * - A resend is a replay: each turn carries an Idempotency-Key, the message's own
 *   `idempotency_key` (an edge extension) or a hash of the message, so the same message again
 *   (after a reconnect too) replays the stored turn instead of running or storing it twice.
 * - A socket closing mid-turn cancels the turn (nothing is committed, as for a POST whose client
 *   went away); a resend then runs it.
 * - Limits: SOCKET_LIFETIME_MS (then `websocket_connection_limit_reached` and a close), one
 *   message at most MAX_BODY_BYTES (`payload_too_large`), text frames only.
 *
 * @example
 * private readonly sockets = new ResponsesSockets(this.ctx, socketResponder(this.env, this.ctx));
 * override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer) { await this.sockets.message(ws, message); }
 */
export class ResponsesSockets {
  /** Sockets with a response in flight (a turn keeps the object awake, so memory holds this). */
  private readonly inFlight = new Map<WebSocket, AbortController>();

  constructor(
    private readonly ctx: DurableObjectState,
    private readonly responder: SocketResponder,
  ) {}

  /** Accepts a forwarded upgrade (`socketUpgrade`): a hibernatable socket with its attachment. */
  accept(request: Request): Response {
    const socket = request.headers.get(SOCKET_HEADER);
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket" || socket === null) return new Response("expected a forwarded WebSocket upgrade", { status: 426 });
    const pair = new WebSocketPair();
    const [client, server] = [pair[0], pair[1]];
    this.ctx.acceptWebSocket(server);
    const attachment: SocketAttachment = { ...(JSON.parse(socket) as Omit<SocketAttachment, "openedAt">), openedAt: Date.now() };
    server.serializeAttachment(attachment);
    // Named as a POST's answer names it.
    return new Response(null, { status: 101, webSocket: client, headers: { "x-trajectory-id": attachment.trajectoryId } });
  }

  /** One client message (`webSocketMessage`). */
  async message(ws: WebSocket, data: string | ArrayBuffer): Promise<void> {
    const socket = ws.deserializeAttachment() as SocketAttachment | null;
    if (!socket) return ws.close(1011, "connection state lost");
    if (Date.now() - socket.openedAt >= SOCKET_LIFETIME_MS) {
      this.sendError(ws, new ProtocolError("websocket_connection_limit_reached", `this connection reached its ${SOCKET_LIFETIME_MS / 60_000}-minute limit: open a new one (previous_response_id goes on working)`));
      return ws.close(1000, "connection lifetime reached");
    }
    let create: ReturnType<typeof parseCreate>;
    try {
      create = parseCreate(data, this.responder.maxMessageBytes());
    } catch (e) {
      this.sendError(ws, toProtocolError(e));
      return;
    }
    if (create === null) return;
    if (this.inFlight.has(ws)) {
      this.sendError(ws, new ProtocolError("response_already_in_flight", "a response is already in flight on this connection: send the next response.create after its response.completed (or use another connection)"));
      return;
    }
    // Taken before the first await: the next message sees it.
    const abort = new AbortController();
    this.inFlight.set(ws, abort);
    try {
      if (create.body.generate === false) return await this.warm(ws, socket, create.body);
      const { body, tools } = await this.withChainTools(ws, await this.unwarmed(create.body));
      const key = create.idempotencyKey ?? `ws_${await sha256Hex(JSON.stringify(body))}`;
      const answer = await this.responder.run({ tenant: socket.tenant, headers: { ...socket.headers, "idempotency-key": key }, body }, abort.signal);
      const responseId = await relay(answer, ws, abort.signal);
      if (responseId !== undefined && tools) await this.keepChainTools(ws, responseId, tools);
    } catch (e) {
      if (!abort.signal.aborted) this.sendError(ws, toProtocolError(e));
    } finally {
      this.inFlight.delete(ws);
    }
  }

  /** The socket closed or failed (`webSocketClose`, `webSocketError`): its turn, if any, is cancelled; its warmups go. */
  async closed(ws: WebSocket): Promise<void> {
    this.inFlight.get(ws)?.abort();
    this.inFlight.delete(ws);
    const socket = ws.deserializeAttachment() as SocketAttachment | null;
    const keys = [...(socket?.warmups ?? []).map(warmKey), ...new Set((socket?.toolChains ?? []).map((c) => toolsKey(c.hash)))];
    if (keys.length > 0) await this.ctx.storage.delete(keys);
  }

  /**
   * A message chaining from a response of this connection carries no tools of its own: Codex (0.171)
   * declares its tools once, as `additional_tools` input items, and later messages send only new
   * items. Items of a chained response stay in effect (they are conversation items), so the
   * response's `additional_tools` items are put back in front of the new input. A message with
   * `additional_tools` items of its own declares its tools anew: those are used, not added to.
   * Answers the body to run and the `additional_tools` items in effect for its response (with
   * their hash; undefined: none).
   */
  private async withChainTools(ws: WebSocket, body: Record<string, unknown>): Promise<{ body: Record<string, unknown>; tools?: ChainTools }> {
    const own = inputItems(body.input).filter(isToolItem);
    if (own.length > 0) return { body, tools: { items: own, hash: (await sha256Hex(JSON.stringify(own))).slice(0, 32) } };
    const previous = body.previous_response_id;
    const hash = typeof previous === "string" ? (ws.deserializeAttachment() as SocketAttachment | null)?.toolChains?.find((c) => c.id === previous)?.hash : undefined;
    const inherited = hash === undefined ? undefined : await this.ctx.storage.get<unknown[]>(toolsKey(hash));
    if (!inherited) return { body };
    return { body: { ...body, input: [...inherited, ...inputItems(body.input)] }, tools: { items: inherited, hash: hash! } };
  }

  /**
   * Notes a response's `additional_tools` items for the messages that chain from it (the last
   * WARMUPS_KEPT responses). The items are written once per distinct list (a chain that keeps its
   * tools writes nothing per turn) and deleted when no kept response names them.
   */
  private async keepChainTools(ws: WebSocket, responseId: string, tools: ChainTools): Promise<void> {
    const socket = ws.deserializeAttachment() as SocketAttachment | null;
    if (!socket) return;
    const kept = socket.toolChains ?? [];
    if (!kept.some((c) => c.hash === tools.hash)) await this.ctx.storage.put(toolsKey(tools.hash), tools.items);
    const toolChains = [...kept, { id: responseId, hash: tools.hash }];
    const dropped = toolChains.length > WARMUPS_KEPT ? toolChains.shift()! : undefined;
    if (dropped && !toolChains.some((c) => c.hash === dropped.hash)) await this.ctx.storage.delete(toolsKey(dropped.hash));
    ws.serializeAttachment({ ...socket, toolChains });
  }

  /**
   * A warmup (`generate: false`): no turn runs and nothing joins the transcript; its body waits in
   * storage under the id its events name, for the message that chains from it (`unwarmed`).
   */
  private async warm(ws: WebSocket, socket: SocketAttachment, body: Record<string, unknown>): Promise<void> {
    const { generate: _generate, ...rest } = body;
    const events = await this.responder.warm({ tenant: socket.tenant, headers: socket.headers, body: rest });
    const id = (events[0] as { response: { id: string } }).response.id;
    await this.ctx.storage.put(warmKey(id), rest);
    const warmups = [...(socket.warmups ?? []), id];
    if (warmups.length > WARMUPS_KEPT) await this.ctx.storage.delete(warmKey(warmups.shift()!));
    ws.serializeAttachment({ ...socket, warmups });
    for (const event of events) send(ws, JSON.stringify(event));
  }

  /** A message chaining from a warmup: the warmup's request with this one's fields, its input followed by this one's. */
  private async unwarmed(body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const previous = body.previous_response_id;
    if (typeof previous !== "string") return body;
    const warm = await this.ctx.storage.get<Record<string, unknown>>(warmKey(previous));
    if (!warm) return body;
    const { previous_response_id: _previous, ...rest } = body;
    return { ...warm, ...rest, input: [...inputItems(warm.input), ...inputItems(body.input)] };
  }

  private sendError(ws: WebSocket, err: ProtocolError): void {
    send(ws, JSON.stringify({ type: "error", status: err.httpStatus, ...this.responder.errorBody(err) }));
  }
}

function warmKey(id: string): string {
  return `responses-socket-warmup:${id}`;
}

function toolsKey(hash: string): string {
  return `responses-socket-tools:${hash}`;
}

/** The `additional_tools` items in effect for a response, and the hash they are stored under. */
interface ChainTools {
  items: unknown[];
  hash: string;
}

function isToolItem(item: unknown): boolean {
  return typeof item === "object" && item !== null && (item as { type?: unknown }).type === "additional_tools";
}

/** A Responses `input` as items (a string is one user message). */
function inputItems(input: unknown): unknown[] {
  if (input === undefined || input === null) return [];
  return typeof input === "string" ? [{ role: "user", content: input }] : Array.isArray(input) ? input : [input];
}

/**
 * A `response.create` message's Responses body (`stream` implied) and its `idempotency_key`;
 * null for Codex's `response.processed` (its acknowledgement of a response: nothing to do).
 */
function parseCreate(data: string | ArrayBuffer, maxBytes: number): { body: Record<string, unknown>; idempotencyKey: string | undefined } | null {
  if (typeof data !== "string") throw new ProtocolError("invalid_request", "binary messages are not served: send each response.create as JSON text");
  const bytes = new TextEncoder().encode(data).byteLength;
  if (bytes > maxBytes) throw new ProtocolError("payload_too_large", `the message is ${bytes} bytes; the limit is ${maxBytes} (MAX_BODY_BYTES)`);
  let event: unknown;
  try {
    event = JSON.parse(data);
  } catch (e) {
    throw new ProtocolError("invalid_request", `the message is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof event !== "object" || event === null || Array.isArray(event)) throw new ProtocolError("invalid_request", "a message must be a JSON object");
  const { type, stream: _stream, stream_id: _lane, idempotency_key: key, ...body } = event as Record<string, unknown>;
  if (type === "response.processed") return null;
  if (type !== "response.create") throw new ProtocolError("invalid_request", `unsupported event type ${JSON.stringify(type)}: only response.create is served`);
  // Stored whatever `store` says: OpenAI keeps a `store: false` chain in the connection's memory;
  // here the trajectory object is that memory, so `previous_response_id` works across connections too.
  if (body.background === true) throw new ProtocolError("invalid_request", "background is not supported over WebSocket");
  if (key !== undefined && (typeof key !== "string" || key.length === 0 || key.length > 256)) throw new ProtocolError("invalid_request", "idempotency_key must be 1-256 characters");
  return { body: { ...body, store: true, stream: true }, idempotencyKey: key as string | undefined };
}

/**
 * An answer to the socket: each SSE event's data as one message; a refusal as OpenAI's error event.
 * Answers the id of the response it completed (undefined: none completed).
 */
async function relay(answer: Response, ws: WebSocket, signal: AbortSignal): Promise<string | undefined> {
  if (answer.status !== 200 || !answer.body) {
    const body = (await answer.json().catch(() => ({ error: { type: "server_error", code: "internal_error", message: `HTTP ${answer.status}`, param: null } }))) as object;
    send(ws, JSON.stringify({ type: "error", status: answer.status, ...body }));
    return undefined;
  }
  let completed: string | undefined;
  const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
  const stop = () => void reader.cancel().catch(() => {});
  signal.addEventListener("abort", stop);
  try {
    let pending = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return completed;
      pending += value;
      for (let end = pending.indexOf("\n\n"); end >= 0; end = pending.indexOf("\n\n")) {
        const data = pending
          .slice(0, end)
          .split("\n")
          .filter((line) => line.startsWith("data: "))
          .map((line) => line.slice(6))
          .join("\n");
        pending = pending.slice(end + 2);
        if (/^\{"type":"response\.(completed|incomplete)"/.test(data)) completed = (JSON.parse(data) as { response: { id: string } }).response.id;
        // The client is gone: stop reading, which cancels the turn (nothing is committed).
        if (data && !send(ws, data)) {
          stop();
          return undefined;
        }
      }
    }
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

function send(ws: WebSocket, text: string): boolean {
  try {
    ws.send(text);
    return true;
  } catch {
    return false;
  }
}
