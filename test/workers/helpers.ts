import { runInDurableObject } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { expect } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { TrajectoryStore } from "../../durable-objects/trajectory/trajectory-store";
import { trajectoryStub } from "../../durable-objects/trajectory/trajectory-do";
import type { TrajectoryMeta } from "../../durable-objects/turn/turn-types";
import type { CommitTurn, TurnRecord } from "../../durable-objects/turn/turn-types";
import { TENANTS } from "./tenants";

export type TenantName = keyof typeof TENANTS;

const ORIGIN = "http://edge.test";

/** Greedy, tiny replies: the backend's work stays in the tens of milliseconds. */
export const SMALL = { max_tokens: 2, temperature: 0 } as const;

/** A fresh id, so tests never share a trajectory (storage lives for the whole run). */
export function uid(prefix: string): string {
  return `${prefix}-${crypto.randomUUID().slice(0, 13)}`;
}

export interface CallOptions {
  method?: string;
  /** Which test tenant's key to send; `null` sends no Authorization header. */
  tenant?: TenantName | null;
  /** A raw Authorization value (overrides `tenant`). */
  authorization?: string;
  /** JSON-serialized unless a string, Uint8Array or stream. */
  body?: unknown;
  headers?: Record<string, string>;
}

/** One request to the edge Worker's default export (the real Hono app in workerd). */
export function call(path: string, options: CallOptions = {}): Promise<Response> {
  const headers = new Headers(options.headers);
  const tenant = options.tenant === undefined ? "a" : options.tenant;
  if (options.authorization !== undefined) headers.set("authorization", options.authorization);
  else if (tenant !== null) headers.set("authorization", `Bearer ${TENANTS[tenant].key}`);
  let body: BodyInit | undefined;
  if (options.body !== undefined) {
    if (typeof options.body === "string" || options.body instanceof Uint8Array || options.body instanceof ReadableStream) body = options.body;
    else {
      body = JSON.stringify(options.body);
      headers.set("content-type", "application/json");
    }
  }
  const method = options.method ?? (body === undefined ? "GET" : "POST");
  return exports.default.fetch(new Request(`${ORIGIN}${path}`, { method, headers, ...(body !== undefined ? { body } : {}) }));
}

/** POST /v1/chat/completions. */
export function chat(body: Record<string, unknown>, options: Omit<CallOptions, "body" | "method"> = {}): Promise<Response> {
  return call("/v1/chat/completions", { ...options, method: "POST", body });
}

/** The path of a tenant's trajectory URL: `/v1/tenants/{tenant}/trajectories[/{id}]` and `suffix` (e.g. "/turns"). */
export function trajectoryPath(tenant: TenantName, id?: string, suffix = ""): string {
  return `/v1/tenants/${TENANTS[tenant].name}/trajectories${id === undefined ? "" : `/${id}`}${suffix}`;
}

/** Creates a trajectory through its trajectory URL; expects 201. */
export async function createTrajectory(tenant: TenantName, id: string): Promise<void> {
  const res = await call(trajectoryPath(tenant), { tenant, body: { id } });
  expect(res.status).toBe(201);
  await res.body?.cancel();
}

export interface ChatCompletion {
  choices: { index: number; message: { role: string; content: string | null; tool_calls?: unknown[] }; finish_reason: string }[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number; prompt_tokens_details: { cached_tokens: number } };
  object: string;
  model: string;
  id: string;
}

export interface ErrorBody {
  error: { message: string; type: string; code: string; param: null };
}

/** Reads a 200 chat.completion, failing with the body when the status is not 200. */
export async function completion(res: Response): Promise<ChatCompletion> {
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as ChatCompletion;
}

/** Reads an error response and checks its status and code. */
export async function expectError(res: Response, status: number, code: string): Promise<ErrorBody> {
  const text = await res.text();
  expect(res.status, text).toBe(status);
  expect(res.headers.get("content-type")).toMatch(/application\/json/);
  const body = JSON.parse(text) as ErrorBody;
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe("string");
  expect(body.error.message.length).toBeGreaterThan(0);
  expect(typeof body.error.type).toBe("string");
  return body;
}

/** The assistant reply of a completion as the transcript stores it. */
export function replyOf(c: ChatCompletion): ChatMessage {
  const m = c.choices[0]!.message;
  return { role: "assistant", content: m.content, ...(m.tool_calls ? { tool_calls: m.tool_calls as ChatMessage["tool_calls"] } : {}) };
}

export function stubOf(tenant: TenantName, id: string) {
  return trajectoryStub(env, TENANTS[tenant].name, id);
}

export interface Stored {
  meta: TrajectoryMeta | null;
  messages: ChatMessage[];
  turns: TurnRecord[];
}

/** What the trajectory's SQLite storage holds, read inside the object (not its in-memory copy). */
export function stored(tenant: TenantName, id: string): Promise<Stored> {
  return runInDurableObject(stubOf(tenant, id), (_instance, state) => {
    const store = new TrajectoryStore(state.storage);
    return { meta: store.meta(), messages: store.messages(), turns: store.turns() };
  });
}

export interface TurnJson {
  turn: number;
  started_at: string;
  mode: "delta" | "full";
  full_reason: string | null;
  route: string | null;
  prompt_tokens: number;
  cached_tokens: number;
  computed_tokens: number;
  completion_tokens: number;
  ttft_ms: number;
  backend_ttft_ms: number;
  total_ms: number;
  backend: string;
  finish_reason: string;
  request_bytes: number;
  prefix_break: { cause: string; message?: number; field?: string; offset?: number; before?: string; after?: string; uncached_from_token?: number } | null;
  repaired: { tool_call_ids: number; json_arguments: number } | null;
  miss: { reason: string; tokens: number; possible_tokens: number; detail: string | null } | null;
}

export interface StateJson {
  object: string;
  id: string;
  tenant: string;
  created_at: string;
  message_count: number;
  idempotency_keys: number;
  backend: string | null;
  turns: TurnJson[];
  forks: { id: string; turn: number; created_at: string }[];
  parent: { id: string; turn: number | null; relation?: string } | null;
  children: { id: string; created_at: string; first_turn: { prompt_tokens: number; cached_tokens: number; backend: string; route: string | null } | null }[];
}

/** GET the trajectory's state through its trajectory URL; expects 200. */
export async function getState(tenant: TenantName, id: string): Promise<StateJson> {
  const res = await call(trajectoryPath(tenant, id), { tenant });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as StateJson;
}

/** Splits an SSE body into its `data:` payloads; checks the framing on the way. */
export function sseData(text: string): string[] {
  expect(text.endsWith("\n\n")).toBe(true);
  const events = text.slice(0, -2).split("\n\n");
  return events.map((e) => {
    expect(e.startsWith("data: ")).toBe(true);
    return e.slice("data: ".length);
  });
}

/** A system prompt no other test uses (so no other test's cache entries can match it). */
export function uniqueSystem(words = 20): ChatMessage {
  return { role: "system", content: `[${crypto.randomUUID()}] You are a careful coding agent. ${"Read the files before editing them. ".repeat(words)}` };
}

/**
 * A synthetic first turn that stores `messages` as the transcript (no backend ran it): for tests
 * that seed a trajectory's storage directly, `new TrajectoryStore(state.storage).commitTurn(seededTurn(messages))`.
 */
export function seededTurn(messages: ChatMessage[]): CommitTurn {
  return {
    keep: 0,
    messages,
    record: { turn: 1, startedAt: new Date().toISOString(), mode: "full", fullReason: "first-turn", promptTokens: 1, cachedTokens: 0, computedTokens: 1, completionTokens: 1, ttftMs: 1, backendTtftMs: 1, totalMs: 1, backend: "test", backendUrl: "http://127.0.0.1:9", finishReason: "length", requestBytes: 0 },
    backendUrl: "http://127.0.0.1:9",
    stateId: "s-1",
    toolsJson: "[]",
    idempotencyKey: undefined,
    fingerprint: "",
    result: undefined as never,
    promptBlockHashes: [],
  };
}
