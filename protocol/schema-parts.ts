import { z } from "zod";

/**
 * The building blocks of the wire schemas (schemas.ts, kv-schemas.ts): field types whose issue
 * messages follow the field path that `codec.ts` prepends ("must be an integer >= 1", "is
 * required" when absent).
 */

/** Error option: "is required" when the field is absent, else `text`. */
export function expect(text: string): { error: (issue: { input?: unknown }) => string } {
  return { error: (issue) => (issue.input === undefined ? "is required" : text) };
}

export function integer(min: number, max: number = Number.MAX_SAFE_INTEGER): z.ZodNumber {
  const text = max === Number.MAX_SAFE_INTEGER ? `must be an integer >= ${min}` : `must be an integer in [${min}, ${max}]`;
  return z.number(expect(text)).int(text).min(min, text).max(max, text);
}

export function oneOf(values: readonly string[]): string {
  return `must be one of ${values.map((v) => JSON.stringify(v)).join(", ")}`;
}

export const string = z.string(expect("must be a string"));
export const nonEmptyString = z.string(expect("must be a non-empty string")).min(1, "must be a non-empty string");
export const boolean = z.boolean(expect("must be a boolean"));
/** Token ids are u32 (the block hash writes them as u32le). */
export const tokenId = integer(0, 0xffff_ffff);
export const count = integer(0);
/** A short block hash: 16 lowercase hex characters. */
export const shortBlockHash = z.string(expect("must be a 16-character lowercase hex string")).regex(/^[0-9a-f]{16}$/, "must be a 16-character lowercase hex string");
export const milliseconds = z.number(expect("must be a finite number >= 0")).min(0, "must be a finite number >= 0");
export const positiveMilliseconds = z.number(expect("must be a finite number > 0")).gt(0, "must be a finite number > 0").max(Number.MAX_SAFE_INTEGER, "must be a finite number > 0");

export function map<S extends z.core.$ZodLooseShape>(shape: S) {
  return z.object(shape, expect("must be a map"));
}

export function array<T extends z.core.SomeType>(item: T) {
  return z.array(item, expect("must be an array"));
}

/** Type-level equality, for the drift checks that fail to compile when a schema and its type differ. */
export type Equals<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
export type Assert<T extends true> = T;
