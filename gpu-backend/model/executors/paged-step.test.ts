import { describe, expect, it } from "vitest";
import { pagedStepInputs, stepInputBytes } from "./paged-step";
import { tinySpec } from "../testing/tiny-spec";

describe("pagedStepInputs: attention_metadata", () => {
  const spec = tinySpec();

  it("holds the step's longest entry, its longest past + new, and that as the lower bound", () => {
    const step = pagedStepInputs(
      [
        { tokenIds: [1], startPos: 39, blockTable: [0, 1, 2], logits: "argmax" },
        // 20 new tokens go to the op as entries of 16 and 4 (past 5 and 21).
        { tokenIds: Array.from({ length: 20 }, (_, i) => i + 1), startPos: 5, blockTable: [3, 4], logits: "last" },
      ],
      spec,
      16,
      8,
      16,
    );
    expect([...step.past]).toEqual([39, 5, 21]);
    expect([...step.metadata]).toEqual([16, 40, 40]);
    expect(stepInputBytes(step)).toBe(4 * (21 + 21 + 4 + 3 + 3 * 3 + 2 + 3)); // ids, positions, cumulative, past, table 3x3, logit rows, metadata
  });

  it("is 12 bytes whatever the context length", () => {
    const at = (pos: number) =>
      pagedStepInputs([{ tokenIds: [7], startPos: pos, blockTable: Array.from({ length: 8 }, (_, i) => i), logits: "argmax" }], spec, 16, 8, 16).metadata;
    expect([...at(3)]).toEqual([1, 4, 4]);
    expect([...at(100)]).toEqual([1, 101, 101]);
    expect(at(100).byteLength).toBe(12);
  });
});
