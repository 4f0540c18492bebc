/**
 * Typed reads of a parsed config.json object: each read checks the field and calls `fail` with
 * "<field> must be ..." when it is wrong. The generic parser and the family files read through it.
 */

/** What a config.json field reader offers (see `fieldReader`). */
export type ConfigFields = ReturnType<typeof fieldReader>;

/**
 * @example
 * const field = fieldReader(json, fail);
 * field.positiveInt("hidden_size"); // 2048, or fail("hidden_size must be a positive integer")
 */
export function fieldReader(json: Record<string, unknown>, fail: (detail: string) => never) {
  const present = (name: string) => json[name] !== undefined && json[name] !== null;
  const isPositiveInt = (v: unknown): v is number => typeof v === "number" && Number.isInteger(v) && v > 0;
  return {
    string(name: string): string {
      const v = json[name];
      if (typeof v !== "string" || v === "") return fail(`${name} must be a non-empty string`);
      return v;
    },
    optionalString(name: string): string | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (typeof v !== "string") return fail(`${name} must be a string`);
      return v;
    },
    positiveInt(name: string): number {
      const v = json[name];
      if (!isPositiveInt(v)) return fail(`${name} must be a positive integer`);
      return v;
    },
    optionalPositiveInt(name: string): number | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (!isPositiveInt(v)) return fail(`${name} must be a positive integer`);
      return v;
    },
    optionalPositiveNumber(name: string): number | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail(`${name} must be a positive number`);
      return v;
    },
    positiveNumber(name: string): number {
      const v = json[name];
      if (typeof v !== "number" || !Number.isFinite(v) || v <= 0) return fail(`${name} must be a positive number`);
      return v;
    },
    optionalBoolean(name: string): boolean | undefined {
      if (!present(name)) return undefined;
      const v = json[name];
      if (typeof v !== "boolean") return fail(`${name} must be true or false`);
      return v;
    },
    tokenIds(name: string): number[] {
      if (!present(name)) return [];
      const v = json[name];
      const list = Array.isArray(v) ? v : [v];
      if (!list.every((x) => typeof x === "number" && Number.isInteger(x) && x >= 0)) {
        return fail(`${name} must be a token id or a list of token ids`);
      }
      return list as number[];
    },
  };
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
