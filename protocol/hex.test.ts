import { describe, expect, it } from "vitest";
import { hmacSha256Hex, secretsEqual, sha256Hex } from "./hex";

describe("secretsEqual", () => {
  it("is true only for the same string", async () => {
    expect(await secretsEqual("dev-secret", "dev-secret")).toBe(true);
    expect(await secretsEqual("", "")).toBe(true);
    expect(await secretsEqual("ünïcödé 🚀", "ünïcödé 🚀")).toBe(true);
    // Same length, one character off (first, middle, last).
    for (const wrong of ["Dev-secret", "dev_secret", "dev-secreT"]) expect(await secretsEqual(wrong, "dev-secret")).toBe(false);
    // Other lengths: a prefix, a longer string, empty.
    for (const wrong of ["dev-secre", "dev-secretx", "", "dev-secret\0"]) expect(await secretsEqual(wrong, "dev-secret")).toBe(false);
    // Differently encoded look-alikes are different secrets.
    expect(await secretsEqual("e\u0301", "\u00e9")).toBe(false);
  });

  it("compares digests, so a secret's own digest is not accepted for it", async () => {
    expect(await secretsEqual(await sha256Hex("dev-secret"), "dev-secret")).toBe(false);
    expect(await secretsEqual(await hmacSha256Hex("k", "m"), await hmacSha256Hex("k", "m"))).toBe(true);
  });
});
