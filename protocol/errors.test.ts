import { describe, expect, it } from "vitest";
import { clampRetryAfter, ERROR_CODE_INFO, ERROR_CODES, isErrorCode, MAX_RETRY_AFTER_S, ProtocolError, retryAfterSeconds, toProtocolError } from "./errors";
import type { ErrorCode } from "./messages";

/** The contract, written out literally so a change to the table is a visible test change. */
const EXPECTED: [ErrorCode, number, boolean][] = [
  ["malformed_msgpack", 400, false],
  ["invalid_request", 400, false],
  ["unauthorized", 401, false],
  ["unknown_model", 404, false],
  ["state_unknown", 409, false],
  ["context_length_exceeded", 400, false],
  ["overloaded", 429, true],
  ["not_found", 404, false],
  ["payload_too_large", 413, false],
  ["trajectory_busy", 409, true],
  ["backend_unavailable", 503, true],
  ["internal_error", 500, false],
  ["invalid_schema", 400, false],
  ["unsupported_schema", 400, false],
  ["unknown_tool", 400, false],
  ["max_tokens_too_small", 400, false],
  ["limit_exceeded", 400, false],
  ["headers_too_large", 431, false],
  ["upgrade_required", 426, false],
  ["response_already_in_flight", 409, true],
  ["websocket_connection_limit_reached", 400, false],
];

describe("error code table", () => {
  it("lists every code exactly once", () => {
    expect([...ERROR_CODES].sort()).toEqual(EXPECTED.map(([code]) => code).sort());
    expect(Object.keys(ERROR_CODE_INFO)).toHaveLength(EXPECTED.length);
  });

  it.each(EXPECTED)("%s → HTTP %i, retryable %s", (code, httpStatus, retryable) => {
    expect(ERROR_CODE_INFO[code]).toEqual({ httpStatus, retryable });
    const err = new ProtocolError(code, "m");
    expect([err.code, err.httpStatus, err.retryable]).toEqual([code, httpStatus, retryable]);
  });

  it("recognises error codes", () => {
    for (const code of ERROR_CODES) expect(isErrorCode(code)).toBe(true);
    for (const value of ["teapot", "toString", "__proto__", "", 400, null, undefined]) expect(isErrorCode(value)).toBe(false);
  });
});

describe("ProtocolError", () => {
  it("is an Error with a name, a message and an optional cause", () => {
    const cause = new Error("disk full");
    const err = new ProtocolError("internal_error", "could not save", { cause });
    expect(err).toBeInstanceOf(Error);
    expect(err.name).toBe("ProtocolError");
    expect(err.message).toBe("could not save");
    expect(err.cause).toBe(cause);
    expect(new ProtocolError("not_found", "x").cause).toBeUndefined();
  });

  it("lets a caller override the retryable default", () => {
    expect(new ProtocolError("overloaded", "x", { retryable: false }).retryable).toBe(false);
    expect(new ProtocolError("internal_error", "x", { retryable: true }).retryable).toBe(true);
  });

  it("converts to and from an error frame", () => {
    const frame = new ProtocolError("overloaded", "queue full").toFrame();
    expect(frame).toEqual({ type: "error", code: "overloaded", message: "queue full", retryable: true });
    const back = ProtocolError.fromFrame({ ...frame, retryable: false });
    expect([back.code, back.message, back.retryable, back.httpStatus]).toEqual(["overloaded", "queue full", false, 429]);
  });
});

describe("retry-after estimates", () => {
  it("carries an overloaded backend's retryAfterS through its error frame", () => {
    const frame = new ProtocolError("overloaded", "queue full", { retryAfterS: 7 }).toFrame();
    expect(frame).toEqual({ type: "error", code: "overloaded", message: "queue full", retryable: true, retryAfterS: 7 });
    expect(ProtocolError.fromFrame(frame).retryAfterS).toBe(7);
    expect("retryAfterS" in new ProtocolError("overloaded", "queue full").toFrame()).toBe(false);
  });

  it("is the queue's drain time at the measured rate, rounded up, within 1..MAX_RETRY_AFTER_S", () => {
    expect(retryAfterSeconds(16_384, 640)).toBe(26);
    expect(retryAfterSeconds(1000, 1000)).toBe(1);
    expect(retryAfterSeconds(1001, 1000)).toBe(2);
    expect(retryAfterSeconds(10, 1_000_000)).toBe(1);
    expect(retryAfterSeconds(1_000_000, 10)).toBe(MAX_RETRY_AFTER_S);
    expect(MAX_RETRY_AFTER_S).toBe(60);
    expect(retryAfterSeconds(1000, undefined)).toBeUndefined();
    expect(retryAfterSeconds(1000, 0)).toBeUndefined();
    expect([clampRetryAfter(0), clampRetryAfter(2.1), clampRetryAfter(600), clampRetryAfter(Number.NaN)]).toEqual([1, 3, 60, 1]);
  });
});

describe("toProtocolError", () => {
  it("returns a ProtocolError unchanged", () => {
    const err = new ProtocolError("state_unknown", "gone");
    expect(toProtocolError(err)).toBe(err);
  });

  it("turns an Error into internal_error, keeping its message and the error as cause", () => {
    const original = new TypeError("x is not a function");
    const err = toProtocolError(original);
    expect([err.code, err.message, err.httpStatus, err.retryable]).toEqual(["internal_error", "x is not a function", 500, false]);
    expect(err.cause).toBe(original);
  });

  it("uses the error's name when its message is empty", () => {
    expect(toProtocolError(new RangeError()).message).toBe("RangeError");
  });

  it("keeps a thrown string or an object's message", () => {
    expect(toProtocolError("boom").message).toBe("boom");
    expect(toProtocolError({ message: "from an object" }).message).toBe("from an object");
  });

  it("never throws, whatever was thrown", () => {
    expect(toProtocolError(undefined).message).toBe("non-error value thrown: undefined");
    expect(toProtocolError(42).message).toBe("non-error value thrown: 42");
    expect(toProtocolError(Object.create(null)).message).toBe("non-error value thrown");
    expect(toProtocolError(Symbol("s")).code).toBe("internal_error");
    for (const value of [null, { message: 5 }, [1, 2]]) expect(toProtocolError(value).code).toBe("internal_error");
  });
});
