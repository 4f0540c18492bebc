import { existsSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { SLOW_FILES } from "./support/sequencer";

describe("the slow-first sequencer's file list", () => {
  it("names only test files that exist (a moved file would silently lose its place at the front)", () => {
    const missing = Object.keys(SLOW_FILES).filter((f) => !existsSync(f));
    expect(missing).toEqual([]);
  });
});
