import { describe, expect, it } from "vitest";
import { SequenceLookup } from "../../gpu-backend/speculative/sequence-lookup";
import { fixedLength, replayReply, sumCounts } from "./draft-replay";

describe("replayReply", () => {
  it("counts the draft tokens the reply confirms, plus one true token per step", () => {
    // The prompt holds 5 6 7 8 9; the reply copies it after 5, then ends with a token never seen.
    const counts = replayReply(new SequenceLookup(), "t", [1, 5, 6, 7, 8, 9, 2], [5, 6, 7, 8, 9, 3], fixedLength(3));
    // Step 1: after 2, no match: 5. Step 2: after 5, draft 6 7 8, all kept, plus 9. Step 3: after 9, draft 2 5 6: none kept, plus 3.
    expect(counts).toEqual({ replyTokens: 6, steps: 3, drafted: 6, accepted: 3 });
    expect(sumCounts([counts, counts])).toEqual({ replyTokens: 12, steps: 6, drafted: 12, accepted: 6 });
  });

  it("drafts nothing when the policy says 0", () => {
    expect(replayReply(new SequenceLookup(), "t", [1, 2, 3], [1, 2, 3], fixedLength(0))).toEqual({ replyTokens: 3, steps: 3, drafted: 0, accepted: 0 });
  });
});
