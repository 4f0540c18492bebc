/** The model the local backend pool serves by default. */
export const DEFAULT_MODEL_ID = "demo-llama-random";
