import { describe, expect, it } from "vitest";
import { ProtocolError } from "../../protocol";
import { edgeSettings, parseModelAliases } from "../../durable-objects/settings";
import { globMatches, isStrictTenant, resolveModel } from "./model-names";

const settings = edgeSettings({
  MODEL_ALIASES: JSON.stringify({ "*": { "claude-*": "demo-llama-random", "gpt-*-codex": "qwen3-coder", "gone-*": "not-served" }, acme: { "claude-opus-*": "qwen3-coder", fast: "demo-llama-random" } }),
  STRICT_TENANTS: "acme, strictco",
});
const two = ["demo-llama-random", "qwen3-coder"];

function refused(f: () => unknown): ProtocolError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(ProtocolError);
    return e as ProtocolError;
  }
  throw new Error("resolved");
}

describe("resolveModel", () => {
  it("no name: the first served (the fallback while none is); a served name: itself", () => {
    expect(resolveModel({ requested: undefined, served: two, tenant: "t", settings })).toBe("demo-llama-random");
    expect(resolveModel({ requested: undefined, served: [], tenant: "t", settings })).toBe("demo-llama-random");
    expect(resolveModel({ requested: "qwen3-coder", served: two, tenant: "acme", settings })).toBe("qwen3-coder");
  });

  it("aliases: the tenant's map first, then *'s, first match wins", () => {
    expect(resolveModel({ requested: "claude-opus-4-1", served: two, tenant: "acme", settings })).toBe("qwen3-coder");
    expect(resolveModel({ requested: "claude-opus-4-1", served: two, tenant: "other", settings })).toBe("demo-llama-random");
    expect(resolveModel({ requested: "claude-sonnet-4-5-20250929", served: two, tenant: "acme", settings })).toBe("demo-llama-random");
    expect(resolveModel({ requested: "gpt-5-codex", served: two, tenant: "t", settings })).toBe("qwen3-coder");
    expect(resolveModel({ requested: "fast", served: two, tenant: "acme", settings })).toBe("demo-llama-random");
    const e = refused(() => resolveModel({ requested: "gone-1", served: two, tenant: "t", settings }));
    expect(e.code).toBe("unknown_model");
    expect(e.httpStatus).toBe(404);
    expect(e.message).toBe('model "gone-1" maps to "not-served" (MODEL_ALIASES pattern "gone-*"), which no backend serves (served: demo-llama-random, qwen3-coder)');
  });

  it("one model served: any name serves it, unless the tenant is strict", () => {
    expect(resolveModel({ requested: "gpt-4o", served: ["demo-llama-random"], tenant: "t", settings })).toBe("demo-llama-random");
    const e = refused(() => resolveModel({ requested: "gpt-4o", served: ["demo-llama-random"], tenant: "acme", settings }));
    expect(e.code).toBe("unknown_model");
    expect(e.message).toBe('model "gpt-4o" is not served (served: demo-llama-random); this tenant takes served names and MODEL_ALIASES only (STRICT_TENANTS)');
    expect(resolveModel({ requested: "claude-x", served: ["demo-llama-random"], tenant: "strictco", settings })).toBe("demo-llama-random");
  });

  it("several served and no alias: 404 naming the model; none served: the name as given", () => {
    const e = refused(() => resolveModel({ requested: "llama-9", served: two, tenant: "t", settings }));
    expect(e.message).toBe('model "llama-9" is not served (served: demo-llama-random, qwen3-coder); MODEL_ALIASES can map other names');
    expect(resolveModel({ requested: "llama-9", served: [], tenant: "t", settings })).toBe("llama-9");
  });

  it("a malformed MODEL_ALIASES is an internal_error naming the setting; unset is no aliases", () => {
    for (const raw of ["{", "[]", '{"*": []}', '{"*": {"a": 1}}', '{"*": {"a": ""}}']) expect(parseModelAliases(raw), raw).toBeUndefined();
    expect(parseModelAliases(undefined)?.size).toBe(0);
    const bad = edgeSettings({ MODEL_ALIASES: "{" });
    const e = refused(() => resolveModel({ requested: "x", served: two, tenant: "t", settings: bad }));
    expect(e.code).toBe("internal_error");
    expect(e.message).toContain("MODEL_ALIASES");
    expect(resolveModel({ requested: "x", served: ["m"], tenant: "t", settings: edgeSettings({}) })).toBe("m");
    expect(isStrictTenant(settings, "acme")).toBe(true);
    // From the env, as the routes call it.
    const env = { MODEL_ALIASES: '{"*": {"gpt-*": "b"}}', STRICT_TENANTS: "s" };
    expect(resolveModel({ requested: "gpt-5", served: ["a", "b"], tenant: "t", env })).toBe("b");
    expect(() => resolveModel({ requested: "x", served: ["a"], tenant: "s", env })).toThrow(ProtocolError);
    expect(resolveModel({ requested: "x", served: ["a"], tenant: "t" })).toBe("a");
    expect(isStrictTenant(edgeSettings({}), "acme")).toBe(false);
  });
});

describe("globMatches", () => {
  it.each([
    ["claude-*", "claude-opus-4-1", true],
    ["claude-*", "claude-", true],
    ["claude-*", "xclaude-a", false],
    ["gpt-*-codex", "gpt-5-codex", true],
    ["gpt-*-codex", "gpt-5-codex-mini", false],
    ["*", "anything", true],
    ["a*b*c", "abc", true],
    ["a*b*c", "acb", false],
    ["ab*ba", "aba", false],
    ["exact", "exact", true],
    ["exact", "exactly", false],
  ])("%s ~ %s: %s", (pattern, name, match) => {
    expect(globMatches(pattern, name)).toBe(match);
  });
});
