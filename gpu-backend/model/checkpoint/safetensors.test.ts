import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ModelLoadError } from "./model-load-error";
import { bf16ToF32, f16ToF32, f32ToBf16, f32ToF16, openSafetensors, writeSafetensors } from "./safetensors";

const dir = mkdtempSync(join(tmpdir(), "safetensors-test-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The value of an IEEE half word, by the textbook formula (independent of the bit tricks). */
function halfValue(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  if (exp === 0) return sign * mant * 2 ** -24;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

function f32(...values: number[]): Float32Array {
  return new Float32Array(values);
}

/** Writes raw bytes as a safetensors file with the given header. */
function rawFile(name: string, header: unknown, dataBytes: number, headerLengthOverride?: number): string {
  const json = Buffer.from(JSON.stringify(header));
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(headerLengthOverride ?? json.length));
  const path = join(dir, name);
  writeFileSync(path, Buffer.concat([prefix, json, Buffer.alloc(dataBytes)]));
  return path;
}

function loadError(fn: () => unknown): ModelLoadError {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ModelLoadError);
    return e as ModelLoadError;
  }
  throw new Error("expected a ModelLoadError");
}

describe("half and bfloat16 conversion", () => {
  it("widens every one of the 65536 half words exactly", () => {
    const words = new Uint16Array(65536).map((_, i) => i);
    const floats = f16ToF32(words);
    const wrong: number[] = [];
    for (let h = 0; h < 65536; h++) {
      const want = halfValue(h);
      if (Number.isNaN(want) ? !Number.isNaN(floats[h]!) : !Object.is(floats[h], want)) wrong.push(h);
    }
    expect(wrong).toEqual([]);
  });

  it("narrows every non-NaN half value back to the same word", () => {
    const words = new Uint16Array(65536).map((_, i) => i);
    const back = f32ToF16(f16ToF32(words));
    const wrong: number[] = [];
    for (let h = 0; h < 65536; h++) {
      const ok = Number.isNaN(halfValue(h)) ? Number.isNaN(halfValue(back[h]!)) : back[h] === h;
      if (!ok) wrong.push(h);
    }
    expect(wrong).toEqual([]);
  });

  it("rounds float32 to half to nearest, ties to even", () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3c00],
      [-2, 0xc000],
      [1 + 2 ** -11, 0x3c00], // tie between 1 and 1 + 2^-10: even (1)
      [1 + 3 * 2 ** -11, 0x3c02], // tie between 0x3c01 and 0x3c02: even
      [1 + 2 ** -11 + 2 ** -20, 0x3c01], // just above the tie
      [65504, 0x7bff], // largest half
      [65519.99, 0x7bff], // below the midpoint to 2^16
      [65520, 0x7c00], // the midpoint rounds to even: infinity
      [1e6, 0x7c00],
      [-1e6, 0xfc00],
      [Infinity, 0x7c00],
      [-Infinity, 0xfc00],
      [2 ** -24, 0x0001], // smallest subnormal
      [2 ** -25, 0x0000], // tie between 0 and 2^-24: even (0)
      [1.5 * 2 ** -25, 0x0001],
      [3 * 2 ** -25, 0x0002], // tie between 1 and 2 subnormal steps: even (2)
      [1023 * 2 ** -24, 0x03ff], // largest subnormal
      [2 ** -14, 0x0400], // smallest normal
      [2 ** -14 - 2 ** -25, 0x0400], // tie between 0x03ff and 0x0400: even (0x0400)
      [1e-10, 0x0000],
      [-1e-10, 0x8000],
    ];
    const got = f32ToF16(f32(...cases.map(([v]) => v)));
    cases.forEach(([value, word], i) => expect([value, got[i]]).toEqual([value, word]));
    const nan = f32ToF16(f32(NaN))[0]!;
    expect(Number.isNaN(halfValue(nan))).toBe(true);
  });

  it("rounds float32 to bfloat16 to nearest, ties to even", () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [-0, 0x8000],
      [1, 0x3f80],
      [1 + 2 ** -8, 0x3f80], // tie: even
      [1 + 3 * 2 ** -8, 0x3f82], // tie between 0x3f81 and 0x3f82: even
      [1 + 2 ** -8 + 2 ** -20, 0x3f81],
      [-1.5, 0xbfc0],
      [Infinity, 0x7f80],
      [-Infinity, 0xff80],
      [3.3895313892515355e38, 0x7f7f], // largest bfloat16
      [3.4028234663852886e38, 0x7f80], // largest float32 rounds up to infinity
      [2 ** -133, 0x0001], // smallest bfloat16 subnormal
    ];
    const got = f32ToBf16(f32(...cases.map(([v]) => v)));
    cases.forEach(([value, word], i) => expect([value, got[i]]).toEqual([value, word]));
    const nan = f32ToBf16(f32(NaN))[0]!;
    expect(nan & 0x7f80).toBe(0x7f80);
    expect(nan & 0x7f).not.toBe(0);
    // A NaN whose payload sits only in the low half must stay NaN, not become infinity.
    const lowPayloadNan = new Float32Array(new Uint32Array([0x7f800001]).buffer);
    expect(f32ToBf16(lowPayloadNan)[0]! & 0x7f).not.toBe(0);
  });

  it("widens bfloat16 by shifting", () => {
    const got = bf16ToF32(new Uint16Array([0x3f80, 0xc000, 0x7f80, 0xff80, 0x0001, 0x8000, 0x7fc0]));
    expect([...got.slice(0, 6)]).toEqual([1, -2, Infinity, -Infinity, 2 ** -133, -0]);
    expect(Object.is(got[5], -0)).toBe(true);
    expect(Number.isNaN(got[6]!)).toBe(true);
  });
});

describe("writeSafetensors / openSafetensors", () => {
  const values = f32(0, -0, 1, -1.5, 0.1, 3.14159, 65504, 1e-7, 2 ** -24, 123456.789, -Infinity, Infinity);

  it("round-trips F32 exactly and F16/BF16 to the rounded values", () => {
    const path = join(dir, "round-trip.safetensors");
    writeSafetensors(
      path,
      {
        "a.f32": { dtype: "F32", shape: [3, 4], data: values },
        "a.f16": { dtype: "F16", shape: [12], data: values },
        "a.bf16": { dtype: "BF16", shape: [2, 2, 3], data: values },
        "raw.bf16": { dtype: "BF16", shape: [2], data: new Uint16Array([0x3f80, 0x4000]) },
        empty: { dtype: "F32", shape: [0, 4], data: new Float32Array(0) },
      },
      { format: "pt", note: "test" },
    );
    const file = openSafetensors(path);
    expect(file.tensorNames).toEqual(["a.f32", "a.f16", "a.bf16", "raw.bf16", "empty"]);
    expect(file.metadata).toEqual({ format: "pt", note: "test" });
    expect(file.info("a.bf16")).toMatchObject({ dtype: "BF16", shape: [2, 2, 3], byteLength: 24 });
    expect(file.read("a.f32")).toEqual(values);
    expect(file.read("a.f16")).toEqual(f16ToF32(f32ToF16(values)));
    expect(file.read("a.bf16")).toEqual(bf16ToF32(f32ToBf16(values)));
    expect([...file.read("raw.bf16")]).toEqual([1, 2]);
    expect(file.read("empty")).toHaveLength(0);
    // Rounded values, written out by hand: 0.1 → bf16 0x3dcd = 0.10009765625, f16 0x2e66 = 0.0999755859375.
    expect(file.read("a.bf16")[4]).toBe(0.10009765625);
    expect(file.read("a.f16")[4]).toBe(0.0999755859375);
    expect(file.read("a.f16")[9]).toBe(Infinity);
  });

  it("pads the header to a multiple of 8 and writes the documented layout", () => {
    const path = join(dir, "layout.safetensors");
    writeSafetensors(path, { x: { dtype: "F32", shape: [1], data: f32(2) } });
    const bytes = readFileSync(path);
    const headerLength = Number(bytes.readBigUInt64LE(0));
    expect(headerLength % 8).toBe(0);
    expect(JSON.parse(bytes.subarray(8, 8 + headerLength).toString())).toEqual({
      __metadata__: { format: "pt" },
      x: { dtype: "F32", shape: [1], data_offsets: [0, 4] },
    });
    expect(bytes.readFloatLE(8 + headerLength)).toBe(2);
  });

  it("rejects data whose length does not match the shape", () => {
    expect(() => writeSafetensors(join(dir, "bad.safetensors"), { x: { dtype: "F32", shape: [2, 2], data: f32(1) } })).toThrow(/x has 1 values but shape \[2, 2\] holds 4/);
  });
});

describe("openSafetensors errors name the file and the tensor", () => {
  it("a missing file", () => {
    const e = loadError(() => openSafetensors(join(dir, "nope.safetensors")));
    expect(e.message).toBe(`${join(dir, "nope.safetensors")}: file not found`);
  });

  it("a file shorter than the length prefix", () => {
    const path = join(dir, "tiny.safetensors");
    writeFileSync(path, Buffer.alloc(3));
    expect(loadError(() => openSafetensors(path)).message).toMatch(/tiny\.safetensors: not a safetensors file: 3 bytes/);
  });

  it("a header length beyond the end of the file", () => {
    const path = rawFile("long-header.safetensors", {}, 0, 1000);
    expect(loadError(() => openSafetensors(path)).message).toMatch(/long-header\.safetensors: header length 1000 runs past the end of the file/);
  });

  it("a header that is not JSON", () => {
    const path = join(dir, "bad-json.safetensors");
    const prefix = Buffer.alloc(8);
    prefix.writeBigUInt64LE(5n);
    writeFileSync(path, Buffer.concat([prefix, Buffer.from("{nope")]));
    expect(loadError(() => openSafetensors(path)).message).toMatch(/bad-json\.safetensors: header is not valid JSON/);
  });

  it("an unknown dtype", () => {
    const path = rawFile("dtype.safetensors", { w: { dtype: "Q4_K", shape: [2], data_offsets: [0, 2] } }, 2);
    expect(loadError(() => openSafetensors(path)).message).toMatch(/dtype\.safetensors: tensor w has unknown dtype "Q4_K"/);
  });

  it("a known dtype this project cannot read", () => {
    const path = rawFile("int.safetensors", { ids: { dtype: "I64", shape: [2], data_offsets: [0, 16] } }, 16);
    const file = openSafetensors(path);
    expect(loadError(() => file.read("ids")).message).toMatch(/int\.safetensors: tensor ids has dtype I64; only F32, F16 and BF16 are supported/);
  });

  it("data_offsets inconsistent with shape × dtype size", () => {
    const path = rawFile("size.safetensors", { w: { dtype: "F32", shape: [2, 3], data_offsets: [0, 20] } }, 24);
    expect(loadError(() => openSafetensors(path)).message).toMatch(/size\.safetensors: tensor w: data_offsets \[0, 20\] hold 20 bytes but F32 \[2, 3\] needs 24/);
  });

  it("data_offsets out of range (a truncated file)", () => {
    const path = join(dir, "truncated.safetensors");
    writeSafetensors(path, { a: { dtype: "F32", shape: [4], data: f32(1, 2, 3, 4) }, b: { dtype: "F32", shape: [4], data: f32(5, 6, 7, 8) } });
    truncateSync(path, readFileSync(path).length - 6);
    expect(loadError(() => openSafetensors(path)).message).toMatch(/truncated\.safetensors: tensor b: data_offsets \[16, 32\] run past the end of the data .*truncated/);
  });

  it("malformed entries and unknown names", () => {
    const path = rawFile("entries.safetensors", { w: { dtype: "F32", shape: [-1], data_offsets: [0, 0] } }, 0);
    expect(loadError(() => openSafetensors(path)).message).toMatch(/entries\.safetensors: tensor w has an invalid shape/);
    const path2 = rawFile("offsets.safetensors", { w: { dtype: "F32", shape: [1], data_offsets: [4, 0] } }, 4);
    expect(loadError(() => openSafetensors(path2)).message).toMatch(/offsets\.safetensors: tensor w has invalid data_offsets/);
    const ok = rawFile("ok.safetensors", { w: { dtype: "F32", shape: [1], data_offsets: [0, 4] } }, 4);
    expect(loadError(() => openSafetensors(ok).read("v")).message).toMatch(/ok\.safetensors: no tensor named v/);
  });
});
