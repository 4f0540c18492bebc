import type { Stack } from "../../scripts/stack";

/**
 * A running stack's edge as the end-to-end tests call it without an SDK: a chat turn in a named
 * trajectory (`POST /v1/chat/completions` with `x-trajectory-id`, the local dev key) and that
 * trajectory's record (`GET /v1/tenants/local/trajectories/:id`, src/routes/trajectories.ts).
 *
 * @example
 * const res = await chatTurn(stack, "t1", { model: "tiny-llama-random", messages, max_tokens: 2 });
 * const { backend, turns } = await trajectoryRecord(stack, "t1");
 */
export const EDGE_AUTH = { authorization: "Bearer sk-local-dev", "content-type": "application/json" };

/** The response of one chat turn of trajectory `trajectoryId`, `body` the Chat Completions request. */
export function chatTurn(stack: Pick<Stack, "edgeUrl">, trajectoryId: string, body: object): Promise<Response> {
  return fetch(`${stack.edgeUrl}/v1/chat/completions`, { method: "POST", headers: { ...EDGE_AUTH, "x-trajectory-id": trajectoryId }, body: JSON.stringify(body) });
}

/** The fields of a trajectory's record the tests read. */
export interface TrajectoryRecord {
  message_count: number;
  backend: string;
  turns: { turn: number; mode: string; full_reason: string | null; backend: string; cached_tokens: number }[];
}

export async function trajectoryRecord(stack: Pick<Stack, "edgeUrl">, id: string): Promise<TrajectoryRecord> {
  return (await (await fetch(`${stack.edgeUrl}/v1/tenants/local/trajectories/${id}`, { headers: EDGE_AUTH })).json()) as TrajectoryRecord;
}
