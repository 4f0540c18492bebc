/**
 * The one error type for a model folder that cannot be loaded: a missing file, a malformed
 * config or tokenizer, a broken or incomplete safetensors file, a tensor of the wrong shape.
 * The message always starts with the file it is about.
 *
 * @example
 * throw new ModelLoadError("/models/x/config.json", "num_hidden_layers must be a positive integer");
 * // message: "/models/x/config.json: num_hidden_layers must be a positive integer"
 */
export class ModelLoadError extends Error {
  override readonly name = "ModelLoadError";
  /** The file the error is about (as the caller named it: a path or a file name). */
  readonly file: string;
  /** The message without the file prefix. */
  readonly detail: string;

  constructor(file: string, detail: string, options?: { cause?: unknown }) {
    super(`${file}: ${detail}`, options);
    this.file = file;
    this.detail = detail;
  }
}
