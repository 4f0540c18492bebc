import { describe, expect, it } from "vitest";
import { sessionKey, userIdSession } from "./session-key";

const headers = (h: Record<string, string>) => (name: string) => h[name];

describe("sessionKey", () => {
  it("follows the documented precedence: explicit ids, then each CLI's session header, then body fields", () => {
    const all = {
      "x-trajectory-id": "t1",
      "x-session-affinity": "a1",
      "x-claude-code-session-id": "cc-1",
      "session-id": "codex-1",
      "x-session-id": "ses_1",
    };
    const hints = { promptCacheKey: "pck-1", metadataUserId: "user_x_account_y_session_meta-1" };
    const order: [string, string, "explicit" | "session"][] = [
      ["x-trajectory-id", "t1", "explicit"],
      ["x-session-affinity", "a1", "explicit"],
      ["x-claude-code-session-id", "cc-1", "session"],
      ["session-id", "codex-1", "session"],
      ["x-session-id", "ses_1", "session"],
    ];
    const left: Record<string, string> = { ...all };
    for (const [name, id, kind] of order) {
      expect(sessionKey(headers(left), hints)).toEqual({ id, kind, source: name });
      delete left[name];
    }
    expect(sessionKey(headers(left), hints)).toEqual({ id: "pck-1", kind: "explicit", source: "prompt_cache_key" });
    expect(sessionKey(headers(left), { metadataUserId: hints.metadataUserId })).toEqual({ id: "meta-1", kind: "session", source: "metadata.user_id" });
    expect(sessionKey(headers({}), {})).toBeUndefined();
  });

  it("refuses a malformed explicit id but maps a client's session id into the id alphabet", () => {
    expect(() => sessionKey(headers({ "x-trajectory-id": "no spaces" }), {})).toThrow(/trajectory id must be/);
    expect(() => sessionKey(headers({}), { promptCacheKey: "a/b" })).toThrow(/trajectory id must be/);
    expect(sessionKey(headers({ "x-session-id": "ses a/b" }), {})).toEqual({ id: "ses_a_b", kind: "session", source: "x-session-id" });
    expect(sessionKey(headers({ "session-id": "x".repeat(300) }), {})!.id).toHaveLength(128);
  });

  it("names a subagent's own trajectory, linked to its parent", () => {
    const sub = sessionKey(headers({ "x-claude-code-session-id": "s1", "x-claude-code-agent-id": "ag2" }), {});
    expect(sub).toEqual({ id: "s1.ag2", kind: "session", source: "x-claude-code-agent-id", parent: "s1" });
    const nested = sessionKey(headers({ "x-claude-code-session-id": "s1", "x-claude-code-agent-id": "ag3", "x-claude-code-parent-agent-id": "ag2" }), {});
    expect(nested).toEqual({ id: "s1.ag3", kind: "session", source: "x-claude-code-agent-id", parent: "s1.ag2" });
    expect(sessionKey(headers({ "x-session-id": "ses_child", "x-parent-session-id": "ses_parent" }), {})).toEqual({ id: "ses_child", kind: "session", source: "x-session-id", parent: "ses_parent" });
  });
});

describe("userIdSession", () => {
  it("reads both of Claude Code's metadata.user_id shapes", () => {
    expect(userIdSession("user_abc_account_def_session_1234-5678")).toBe("1234-5678");
    expect(userIdSession(JSON.stringify({ device_id: "d", account_uuid: "", session_id: "9a-bc" }))).toBe("9a-bc");
    expect(userIdSession("user_abc")).toBeUndefined();
    expect(userIdSession("{not json")).toBeUndefined();
    expect(userIdSession(JSON.stringify({ session_id: 7 }))).toBeUndefined();
  });
});
