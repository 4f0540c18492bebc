import { DEFAULT_MODEL_ID } from "./models";

/** Provisional: replaced by the alias map (edge-fields). */
export function resolveModel(p: { requested: string | undefined; served: string[]; tenant: string; env: Env }): string {
  if (p.requested !== undefined && p.served.includes(p.requested)) return p.requested;
  if (p.served.length === 1) return p.served[0]!;
  return p.requested ?? p.served[0] ?? DEFAULT_MODEL_ID;
}
