import type { ConfigFields } from "../config/config-fields";
import type { LayerType } from "../config/model-config";

/**
 * Every layer slides when `sliding_window` is set and shorter than the context (Mistral, Phi-3);
 * a window as long as the context is no window.
 *
 * @example uniformSlidingWindow(field, 32, 131072); // { slidingWindow: 4096, layerTypes: 32 x "sliding_attention" }
 */
export function uniformSlidingWindow(field: ConfigFields, numLayers: number, maxPositions: number): { slidingWindow: number | null; layerTypes: LayerType[] } {
  const window = field.optionalPositiveInt("sliding_window");
  if (window === undefined || window >= maxPositions) return { slidingWindow: null, layerTypes: Array.from({ length: numLayers }, () => "full_attention") };
  return { slidingWindow: window, layerTypes: Array.from({ length: numLayers }, () => "sliding_attention") };
}
