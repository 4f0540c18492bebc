import { describe, expect, it } from "vitest";
import { limit, mergeModels, modelListEntry } from "./model-list";

describe("the model list keeps each model's limits", () => {
  it("one entry per id in first-seen order, the smallest limit of each kind", () => {
    expect(
      mergeModels([
        { id: "a", contextLength: 8192, maxOutputTokens: 4096 },
        { id: "b" },
        { id: "a", contextLength: 4096 },
        { id: "" },
        { id: "b", maxOutputTokens: 1024 },
      ]),
    ).toEqual([
      { id: "a", contextLength: 4096, maxOutputTokens: 4096 },
      { id: "b", maxOutputTokens: 1024 },
    ]);
  });

  it("entries carry context_length and max_output_tokens only when known; limits must be positive integers", () => {
    expect(modelListEntry({ id: "m", contextLength: 2048, maxOutputTokens: 2048 })).toEqual({ id: "m", object: "model", created: 0, owned_by: "agent-edge", context_length: 2048, max_output_tokens: 2048 });
    expect(modelListEntry({ id: "m" })).toEqual({ id: "m", object: "model", created: 0, owned_by: "agent-edge" });
    expect([limit(4096), limit(0), limit(1.5), limit("4096"), limit(null)]).toEqual([4096, undefined, undefined, undefined, undefined]);
  });
});
