import { toProtocolError } from "../../protocol/errors";
import type { Frame } from "../../protocol/messages";

/**
 * Runs `fn`; a throw becomes the turn's error frame.
 *
 * @example guarded(sink, () => engine.start());
 */
export function guarded(sink: (frame: Frame) => void, fn: () => void): void {
  try {
    fn();
  } catch (e) {
    errorFrame(sink, e);
  }
}

/** Sends any thrown value as the turn's error frame (`internal_error` for what is no ProtocolError). */
export function errorFrame(sink: (frame: Frame) => void, e: unknown): void {
  const err = toProtocolError(e);
  sink(err.toFrame());
}
