import { describe, expect, it } from "vitest";
import { WARNING_HEADER_MAX, warningHeader } from "./warnings";

describe("warningHeader", () => {
  it("joins warnings, keeps printable ASCII only, caps the length; none: undefined", () => {
    expect(warningHeader([])).toBeUndefined();
    expect(warningHeader(["a", "b"])).toBe("a; b");
    expect(warningHeader(['tools[0]: "wéb\\n" x'])).toBe('tools[0]: "w?b\\n" x');
    expect(warningHeader(["x\ny\u0000"])).toBe("x?y?");
    const long = warningHeader(["w".repeat(5000)])!;
    expect(long).toHaveLength(WARNING_HEADER_MAX);
    expect(long.endsWith("w...")).toBe(true);
    expect(() => new Headers({ "x-agent-edge-warning": warningHeader(["\u2028 \r\n \u{1F600}"])! })).not.toThrow();
  });
});
