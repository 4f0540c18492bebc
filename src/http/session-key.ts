import { ProtocolError } from "../../protocol";

/**
 * Which trajectory a request names, and how: the one precedence over every header and body field
 * that clients use to name a conversation (docs/edge.md, "Sessions").
 *
 * | rank | where                                   | sent by                         | kind     |
 * |------|-----------------------------------------|---------------------------------|----------|
 * | 1    | `previous_response_id`                  | Responses API clients           | explicit |
 * | 2    | header `x-trajectory-id`                | Agent Edge clients              | explicit |
 * | 3    | header `x-session-affinity`             | routers, gateways               | explicit |
 *
 * (OpenCode sends its `x-session-id` in `x-session-affinity` too: an affinity equal to a client's
 * own session header is that client's session, ranks 4-6.)
 * | 4    | header `x-claude-code-session-id`       | Claude Code                     | session  |
 * | 5    | header `session-id`                     | Codex CLI                       | session  |
 * | 6    | header `x-session-id`                   | OpenCode                        | session  |
 * | 7    | body `prompt_cache_key`                 | OpenAI clients, Codex CLI       | explicit |
 * | 8    | body `metadata.user_id`'s session       | Claude Code (Messages API)      | session  |
 *
 * `derived` (DERIVED_SESSIONS on): a request with tools that names nothing runs in a trajectory
 * named by its start (`turn-dispatch.ts`).
 *
 * `explicit`: the client names the trajectory itself; every turn under it is a trajectory turn,
 * whatever it holds. `session`: the client names its session, under which it also sends side
 * requests (titles, summaries, topic checks) that are not turns of the conversation: those run
 * beside it (`turn-dispatch.ts`), never locking or rewriting it.
 *
 * A subagent is its own trajectory, linked to its parent: Claude Code's `x-claude-code-agent-id`
 * names `<session>.<agent>` with parent `<session>` (or `<session>.<parent agent>` from
 * `x-claude-code-parent-agent-id`); OpenCode's `x-parent-session-id` names the parent of its
 * `x-session-id`.
 */
export interface SessionKey {
  /** The trajectory id (checked: 1-128 of [A-Za-z0-9._:-]). */
  id: string;
  kind: "explicit" | "session" | "derived";
  /** Where the id came from (a header name, `prompt_cache_key` or `metadata.user_id`). */
  source: string;
  /** The parent trajectory of a subagent's. */
  parent?: string;
}

/** What a parsed body contributes to naming the trajectory. */
export interface SessionHints {
  promptCacheKey?: string | undefined;
  /** Messages API `metadata.user_id`, as sent. */
  metadataUserId?: string | undefined;
}

/**
 * Every header `sessionKey` reads: what a Responses WebSocket's upgrade request passes on to each
 * of its turns, so they are named as that request's POSTs would be.
 *
 * @example const named = SESSION_HEADERS.filter((h) => req.headers.has(h));
 */
export const SESSION_HEADERS = ["x-trajectory-id", "x-session-affinity", "x-claude-code-session-id", "x-claude-code-agent-id", "x-claude-code-parent-agent-id", "session-id", "x-session-id", "x-parent-session-id"] as const;

const TRAJECTORY_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Trajectory ids are 1-128 characters of [A-Za-z0-9._:-]. */
export function checkTrajectoryId(id: string): void {
  if (!TRAJECTORY_ID.test(id)) throw new ProtocolError("invalid_request", "trajectory id must be 1-128 characters of A-Z a-z 0-9 . _ : -");
}

/**
 * The trajectory a request names (see {@link SessionKey}'s table), or undefined: a stateless turn.
 * An explicit id that is not a valid trajectory id is refused (`invalid_request`); a session id
 * from a client header that is not one is mapped to one (characters outside the set become `_`,
 * cut to 128), since clients choose those ids, not our users.
 *
 * @example sessionKey((h) => ({ "x-claude-code-session-id": "5f0c-..." })[h], {}) // { id: "5f0c-...", kind: "session", source: "x-claude-code-session-id" }
 */
export function sessionKey(header: (name: string) => string | undefined, hints: SessionHints): SessionKey | undefined {
  const explicit = header("x-trajectory-id");
  if (explicit !== undefined) {
    checkTrajectoryId(explicit);
    return { id: explicit, kind: "explicit", source: "x-trajectory-id" };
  }
  const client = clientSession(header);
  const affinity = header("x-session-affinity");
  // OpenCode's provider sends its session id in both x-session-id and x-session-affinity: the client's session.
  if (affinity !== undefined && affinity !== client?.raw) {
    checkTrajectoryId(affinity);
    return { id: affinity, kind: "explicit", source: "x-session-affinity" };
  }
  if (client) return client.key;
  if (hints.promptCacheKey !== undefined) {
    checkTrajectoryId(hints.promptCacheKey);
    return { id: hints.promptCacheKey, kind: "explicit", source: "prompt_cache_key" };
  }
  const fromUser = hints.metadataUserId === undefined ? undefined : userIdSession(hints.metadataUserId);
  if (fromUser) return { id: sessionId(fromUser), kind: "session", source: "metadata.user_id" };
  return undefined;
}

/** The session a CLI's own header names (ranks 4-6), with the header's raw value. */
function clientSession(header: (name: string) => string | undefined): { key: SessionKey; raw: string } | undefined {
  const claude = header("x-claude-code-session-id");
  if (claude) {
    const session = sessionId(claude);
    const agent = header("x-claude-code-agent-id");
    if (!agent) return { raw: claude, key: { id: session, kind: "session", source: "x-claude-code-session-id" } };
    const parentAgent = header("x-claude-code-parent-agent-id");
    return { raw: claude, key: { id: sessionId(`${session}.${agent}`), kind: "session", source: "x-claude-code-agent-id", parent: parentAgent ? sessionId(`${session}.${parentAgent}`) : session } };
  }
  const codex = header("session-id");
  if (codex) return { raw: codex, key: { id: sessionId(codex), kind: "session", source: "session-id" } };
  const opencode = header("x-session-id");
  if (opencode) {
    const parent = header("x-parent-session-id");
    return { raw: opencode, key: { id: sessionId(opencode), kind: "session", source: "x-session-id", ...(parent ? { parent: sessionId(parent) } : {}) } };
  }
  return undefined;
}

/** A client's session id as a trajectory id: outside [A-Za-z0-9._:-] -> `_`, at most 128 characters. */
function sessionId(raw: string): string {
  const id = raw.replace(/[^A-Za-z0-9._:-]/g, "_").slice(0, 128);
  return id.length > 0 ? id : "_";
}

/**
 * The session in Claude Code's `metadata.user_id`: either JSON with `session_id`, or the older
 * `user_<hash>_account_<uuid>_session_<uuid>` text. Undefined when it names none.
 *
 * @example userIdSession('user_ab12_account__session_0b5e-...') // "0b5e-..."
 */
export function userIdSession(userId: string): string | undefined {
  if (userId.startsWith("{")) {
    try {
      const parsed = JSON.parse(userId) as { session_id?: unknown };
      return typeof parsed.session_id === "string" && parsed.session_id.length > 0 ? parsed.session_id : undefined;
    } catch {
      return undefined;
    }
  }
  const at = userId.lastIndexOf("_session_");
  if (at < 0) return undefined;
  const session = userId.slice(at + "_session_".length);
  return session.length > 0 ? session : undefined;
}
