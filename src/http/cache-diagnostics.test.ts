import { describe, expect, it } from "vitest";
import type { CacheDiagnosis } from "../../durable-objects/turn/cache-diagnosis";
import type { TurnEvent } from "../../durable-objects/turn/turn-types";
import { anthropicDiagnostics, messagesAsked, missedTokens, openaiDiagnostics, responsesAsked, responsesCompare } from "./cache-diagnostics";
import { responseId } from "./response-id";

type Done = Extract<TurnEvent, { type: "done" }>;
const compared = (part: "none" | "model" | "tools" | "system" | "messages"): Extract<CacheDiagnosis, { status: "compared" }> => ({ status: "compared", turn: 1, part, cause: "other", reusableTokens: 109, keptTokens: 9 });
function done(diagnosis: CacheDiagnosis | undefined, cachedTokens: number, miss?: "evicted" | "shorter-than-a-block"): Done {
  const usage = { promptTokens: 150, cachedTokens, computedTokens: 150 - cachedTokens, completionTokens: 5 };
  const turn = { turn: 2, ...usage, ...(miss ? { miss: { reason: miss, tokens: 20, possibleTokens: 109 } } : {}) } as unknown as Done["turn"];
  return { type: "done", message: { role: "assistant", content: "ok" }, finishReason: "stop", usage, turn, replayed: false, ...(diagnosis ? { diagnosis } : {}) };
}

describe("what a request asks", () => {
  it("reads Anthropic's diagnostics object (null id: opted in on a first turn) and ignores any other shape", () => {
    expect(messagesAsked({ diagnostics: { previous_message_id: "msg_1" } })).toEqual({ previous: "msg_1" });
    expect(messagesAsked({ diagnostics: { previous_message_id: null } })).toEqual({ previous: null });
    expect(messagesAsked({ diagnostics: {} })).toEqual({ previous: null });
    expect(messagesAsked({ diagnostics: null })).toBeUndefined();
    expect(messagesAsked({ diagnostics: "yes" })).toBeUndefined();
    expect(messagesAsked({})).toBeUndefined();
  });

  it("reads OpenAI's comparison_response_id, and resolves only our ids", () => {
    expect(responsesAsked({ prompt_cache_options: { comparison_response_id: "resp_x" } })).toBe("resp_x");
    expect(responsesAsked({ prompt_cache_options: { ttl: "30m" } })).toBeUndefined();
    const token = "0".repeat(32);
    expect(responsesCompare(responseId(token, "traj_1"))).toEqual({ api: "responses", token, trajectoryId: "traj_1" });
    expect(responsesCompare("resp_x")).toBeUndefined();
  });
});

describe("missedTokens", () => {
  it("counts the uncached prompt tokens the named turn could have given, or the start's estimate", () => {
    expect(missedTokens(compared("system"), done(undefined, 0).usage)).toBe(109);
    expect(missedTokens(compared("messages"), done(undefined, 64).usage)).toBe(45);
    expect(missedTokens(compared("messages"), done(undefined, 128).usage)).toBe(0);
    expect(missedTokens(compared("system"), undefined)).toBe(100);
  });
});

describe("anthropicDiagnostics", () => {
  const asked = { previous: "msg_1" };
  it("maps each part to Anthropic's reason type", () => {
    for (const [part, type] of [["model", "model_changed"], ["system", "system_changed"], ["tools", "tools_changed"], ["messages", "messages_changed"]] as const) {
      expect(anthropicDiagnostics(asked, compared(part), done(compared(part), 0))).toEqual({ cache_miss_reason: { type, cache_missed_input_tokens: 109 } });
    }
  });

  it("is null when nothing diverged or the first turn named nothing; not found and unavailable otherwise", () => {
    expect(anthropicDiagnostics(asked, compared("none"), done(compared("none"), 100))).toBeNull();
    expect(anthropicDiagnostics({ previous: null }, undefined, done(undefined, 0))).toBeNull();
    expect(anthropicDiagnostics(asked, { status: "not-found" }, undefined)).toEqual({ cache_miss_reason: { type: "previous_message_not_found" } });
    // A turn without a trajectory stores no answers: nothing it could find.
    expect(anthropicDiagnostics(asked, undefined, done(undefined, 0))).toEqual({ cache_miss_reason: { type: "previous_message_not_found" } });
    expect(anthropicDiagnostics(asked, { status: "unavailable", why: "x" }, undefined)).toEqual({ cache_miss_reason: { type: "unavailable" } });
  });
});

describe("openaiDiagnostics", () => {
  const asked = { compare: { api: "responses" as const, token: "t", trajectoryId: "traj_1" } };
  it("says cache_miss with OpenAI's reason, the missed and the reusable tokens", () => {
    expect(openaiDiagnostics(asked, done(compared("system"), 0))).toEqual({ type: "cache_miss", reason: "input_changed", cache_missed_tokens: 109, comparison_reusable_tokens: 109 });
    expect(openaiDiagnostics(asked, done(compared("messages"), 64))).toMatchObject({ reason: "input_changed", cache_missed_tokens: 45 });
    expect(openaiDiagnostics(asked, done(compared("tools"), 0))).toMatchObject({ reason: "tools_changed" });
    expect(openaiDiagnostics(asked, done(compared("model"), 0))).toMatchObject({ reason: "model_changed" });
  });

  it("says cache_hit when nothing diverged and nothing was missed beyond a partial block, else unavailable", () => {
    expect(openaiDiagnostics(asked, done(compared("none"), 109))).toEqual({ type: "cache_hit" });
    expect(openaiDiagnostics(asked, done(compared("none"), 100, "shorter-than-a-block"))).toEqual({ type: "cache_hit" });
    expect(openaiDiagnostics(asked, done(compared("none"), 0, "evicted"))).toEqual({ type: "unavailable" });
  });

  it("says not found for an unknown or foreign id, unavailable without a comparison, null in progress", () => {
    expect(openaiDiagnostics(asked, done({ status: "not-found" }, 0))).toEqual({ type: "comparison_response_not_found" });
    expect(openaiDiagnostics({ compare: undefined }, done(undefined, 0))).toEqual({ type: "comparison_response_not_found" });
    expect(openaiDiagnostics(asked, done(undefined, 0))).toEqual({ type: "unavailable" });
    expect(openaiDiagnostics(asked, undefined)).toBeNull();
  });
});
