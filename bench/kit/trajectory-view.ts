import type { ChatMessage } from "../../protocol/messages";
import { AUTH, TENANT } from "./turn-client";

/**
 * A trajectory as the edge reports it: its state (turn records), its stored transcript (the
 * inspector's view), and where that differs from what a client holds.
 */

export interface TurnRecordView {
  turn: number;
  mode: "delta" | "full";
  full_reason: string | null;
  prompt_tokens: number;
  cached_tokens: number;
  computed_tokens: number;
  ttft_ms: number;
  route: string | null;
  backend: string;
  request_bytes: number;
  kv_pull?: { outcome: string; blocks: number; ms: number } | null;
  miss?: { reason: string; tokens: number; detail: string | null } | null;
}

export interface TrajectoryView {
  message_count: number;
  backend: string | null;
  idempotency_keys: number;
  turns: TurnRecordView[];
}

/** POST /v1/tenants/local/trajectories `{ id }` (201, or 200 when it exists). */
export async function createTrajectory(edgeUrl: string, id: string): Promise<void> {
  const res = await fetch(`${edgeUrl}/v1/tenants/${TENANT}/trajectories`, { method: "POST", headers: AUTH, body: JSON.stringify({ id }) });
  if (res.status !== 201 && res.status !== 200) throw new Error(`creating ${id} answered ${res.status}: ${await res.text()}`);
}

/** GET /v1/tenants/local/trajectories/{id}. */
export async function trajectoryState(edgeUrl: string, id: string): Promise<TrajectoryView> {
  const res = await fetch(`${edgeUrl}/v1/tenants/${TENANT}/trajectories/${encodeURIComponent(id)}`, { headers: AUTH });
  if (!res.ok) throw new Error(`state of ${id} answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as TrajectoryView;
}

/** A stored message as the inspector reports it: role, the first 2,000 characters of its text, and its length. */
export interface StoredMessage {
  role: string;
  text: string;
  truncated: boolean;
  chars: number;
}

/** The stored transcript as the inspector reports it (up to 200 messages). */
export async function storedMessages(edgeUrl: string, id: string): Promise<StoredMessage[]> {
  const res = await fetch(`${edgeUrl}/v1/tenants/${TENANT}/trajectories/${encodeURIComponent(id)}/inspect.json`, { headers: AUTH });
  if (!res.ok) throw new Error(`inspect.json of ${id} answered ${res.status}: ${await res.text()}`);
  const view = (await res.json()) as { messages: StoredMessage[]; messagesOmitted: number };
  if (view.messagesOmitted > 0) throw new Error(`inspect.json of ${id} left ${view.messagesOmitted} messages out: compare shorter trajectories`);
  return view.messages;
}

/**
 * Where the stored transcript differs from the client's (undefined: the same messages in the same
 * order, so nothing was lost or duplicated). A long message is compared by its first 2,000
 * characters and its length.
 *
 * @example transcriptDifference(await storedMessages(edgeUrl, id), transcript) // undefined
 */
export function transcriptDifference(stored: StoredMessage[], expected: ChatMessage[]): string | undefined {
  for (let i = 0; i < Math.max(stored.length, expected.length); i++) {
    const s = stored[i];
    const e = expected[i];
    if (!s || !e) return `stored ${stored.length} messages, the client holds ${expected.length}`;
    const text = e.content ?? "";
    const same = s.truncated ? text.startsWith(s.text) && s.chars === text.length : s.text === text;
    if (s.role !== e.role || !same) return `message ${i}: stored ${s.role} ${JSON.stringify(s.text.slice(0, 80))} (${s.chars} characters), the client holds ${e.role} ${JSON.stringify(text.slice(0, 80))} (${text.length})`;
  }
  return undefined;
}

/** The first model the edge lists (GET /v1/models). */
export async function servedModel(edgeUrl: string): Promise<string> {
  const res = await fetch(`${edgeUrl}/v1/models`, { headers: AUTH });
  if (!res.ok) throw new Error(`GET /v1/models answered ${res.status}: ${await res.text()}`);
  return ((await res.json()) as { data: { id: string }[] }).data[0]!.id;
}
