import { describe, expect, it } from "vitest";
import { hadamard, rotateBlocks, rotationBlock } from "./hadamard";

describe("block Hadamard rotation", () => {
  it("H_b is the Sylvester matrix ((-1)^popcount(i & j) / sqrt(b)), symmetric and orthonormal (its own inverse)", () => {
    const popcount = (n: number) => n.toString(2).split("1").length - 1;
    for (const b of [1, 2, 32, 64]) {
      const h = hadamard(b);
      for (let i = 0; i < b; i++)
        for (let j = 0; j < b; j++) {
          expect(h[i * b + j]).toBeCloseTo((popcount(i & j) % 2 === 0 ? 1 : -1) / Math.sqrt(b), 6);
          expect(h[i * b + j]).toBe(h[j * b + i]);
          let dot = 0;
          for (let k = 0; k < b; k++) dot += h[i * b + k]! * h[j * b + k]!;
          expect(dot).toBeCloseTo(i === j ? 1 : 0, 6);
        }
    }
  });

  it("rotateBlocks is H_b times each block, keeps dot products, and undoes itself", () => {
    const b = 8;
    const v = Float64Array.from({ length: 3 * b }, (_, i) => Math.sin(i * 1.7) * (i === 5 ? 40 : 1));
    const w = Float64Array.from({ length: 3 * b }, (_, i) => Math.cos(i * 0.3));
    const h = hadamard(b);
    const rv = v.slice();
    rotateBlocks(rv, b);
    for (let blk = 0; blk < 3; blk++)
      for (let i = 0; i < b; i++) {
        let expected = 0;
        for (let k = 0; k < b; k++) expected += h[i * b + k]! * v[blk * b + k]!;
        expect(rv[blk * b + i]).toBeCloseTo(expected, 5);
      }
    const rw = w.slice();
    rotateBlocks(rw, b);
    const dot = (a: Float64Array, c: Float64Array) => a.reduce((s, x, i) => s + x * c[i]!, 0);
    expect(dot(rv, rw)).toBeCloseTo(dot(v, w), 10);
    // The outlier (40 at index 5) is spread over its block: no entry of the rotated block above 40 / sqrt(8) + 1.
    expect(Math.max(...Array.from(rv.subarray(0, b), Math.abs))).toBeLessThan(40 / Math.sqrt(b) + 1);
    rotateBlocks(rv, b);
    for (let i = 0; i < v.length; i++) expect(rv[i]).toBeCloseTo(v[i]!, 10);
  });

  it("rotationBlock: 64 where k allows, else 32; refuses a block that is not a power of two", () => {
    expect([512, 576, 1408, 96, 160].map(rotationBlock)).toEqual([64, 64, 64, 32, 32]);
    expect(() => hadamard(24)).toThrow(/power of two/);
    expect(() => rotateBlocks(new Float64Array(10), 4)).toThrow(/multiple of 4/);
  });
});
