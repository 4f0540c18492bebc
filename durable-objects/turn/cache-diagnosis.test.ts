import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../protocol/messages";
import { diagnose, partOf, type NamedTurn } from "./cache-diagnosis";
import { explainBreak } from "./prefix-break";

const system: ChatMessage = { role: "system", content: "You are terse. Today's date: 2026-12-06." };
const stored: ChatMessage[] = [system, { role: "user", content: "hi" }, { role: "assistant", content: "hello" }];
// Turn 2 answered with 100 prompt and 10 reply tokens: 109 reusable (the reply's last has no KV).
const named: NamedTurn = { turn: 2, messageEnd: 3, rewritten: false, toolsHash: "t", model: "m", promptTokens: 100, completionTokens: 10 };
const base = { named, latestTurn: 2, stored, toolsHash: "t", model: "m" };

function compare(incoming: ChatMessage[], over: Partial<typeof base> = {}) {
  const p = { ...base, ...over };
  return diagnose({ ...p, incoming, prefixBreak: explainBreak(p.stored, incoming, undefined, undefined) });
}

describe("diagnose", () => {
  it("finds nothing diverged when the transcript only grew, or retries the named turn's request", () => {
    expect(compare([...stored, { role: "user", content: "more" }])).toEqual({ status: "compared", turn: 2, part: "none", cause: "none", reusableTokens: 109, keptTokens: 109 });
    expect(compare(stored.slice(0, 2))).toMatchObject({ part: "none", cause: "regenerate" });
  });

  it("places an edited system prompt in the system part, whatever the explainer's cause, with the kept share by characters", () => {
    const edited = [{ role: "system" as const, content: "You are terse. Today's date: 2026-12-07." }, ...stored.slice(1)];
    const d = compare([...edited, { role: "user", content: "more" }]);
    expect(d).toMatchObject({ status: "compared", part: "system", cause: "date", reusableTokens: 109 });
    // The difference is 38 characters into the 47 of the named transcript (40 + 2 + 5): most of it was kept.
    expect(d.status === "compared" && d.keptTokens).toBe(Math.round((109 * 38) / 47));
    const other = compare([{ role: "system", content: "Be verbose." }, ...stored.slice(1)]);
    expect(other).toMatchObject({ part: "system", cause: "system-prompt-changed", keptTokens: 0 });
  });

  it("places an edited older message in the messages part", () => {
    const d = compare([system, { role: "user", content: "hey" }, stored[2]!, { role: "user", content: "more" }]);
    expect(d).toMatchObject({ part: "messages", cause: "other" });
    expect(d.status === "compared" && d.keptTokens).toBeGreaterThan(0);
  });

  it("names a model change first, and tools changed since an earlier turn", () => {
    expect(compare([...stored], { model: "other" })).toMatchObject({ part: "model", cause: "model-changed", keptTokens: 0 });
    const earlier = { ...named, turn: 1, messageEnd: 3 };
    expect(compare([...stored], { named: earlier, latestTurn: 4, toolsHash: "u" })).toMatchObject({ part: "tools", cause: "tools-changed", turn: 1 });
  });

  it("compares an earlier turn against its stored transcript, unless a later turn rewrote it", () => {
    const longer = [...stored, { role: "user" as const, content: "more" }, { role: "assistant" as const, content: "ok" }];
    const earlier = { ...named, turn: 1, messageEnd: 3 };
    // The latest turn's break (nothing: the transcript grew) is not the earlier turn's: its system prompt changed.
    const incoming = [{ role: "system" as const, content: "Be verbose." }, ...longer.slice(1), { role: "user" as const, content: "again" }];
    expect(diagnose({ ...base, named: earlier, latestTurn: 2, stored: longer, incoming, prefixBreak: { cause: "none" } })).toMatchObject({ part: "system", turn: 1 });
    expect(diagnose({ ...base, named: { ...earlier, rewritten: true }, latestTurn: 2, stored: longer, incoming, prefixBreak: { cause: "none" } }).status).toBe("unavailable");
  });

  it("answers not-found without a named turn", () => {
    expect(compare(stored, { named: null as unknown as NamedTurn })).toEqual({ status: "not-found" });
  });
});

describe("partOf", () => {
  it("maps every cause by where it lies", () => {
    expect(partOf({ cause: "tools-changed", field: "tools" }, stored, stored)).toBe("tools");
    expect(partOf({ cause: "json-serialization", field: "tools" }, stored, stored)).toBe("tools");
    expect(partOf({ cause: "git-status", message: 0, field: "content" }, stored, stored)).toBe("system");
    expect(partOf({ cause: "timestamp", message: 1, field: "content" }, stored, stored)).toBe("messages");
    // Message 0 of a transcript without a system prompt is a message.
    const noSystem = stored.slice(1);
    expect(partOf({ cause: "other", message: 0, field: "content" }, noSystem, noSystem)).toBe("messages");
    // A system prompt added in front: the system part.
    expect(partOf({ cause: "inserted-before", message: 0, field: "messages" }, noSystem, stored)).toBe("system");
  });
});
