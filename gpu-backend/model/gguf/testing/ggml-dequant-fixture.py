import base64, json, numpy as np
from gguf.quants import dequantize
from gguf.constants import GGMLQuantizationType as T, GGML_QUANT_SIZES
rng = np.random.default_rng(35)
out = {}
for name in ["Q4_0","Q4_1","Q5_0","Q5_1","Q8_0","Q2_K","Q3_K","Q4_K","Q5_K","Q6_K","BF16","F16"]:
    t = T[name]
    block, size = GGML_QUANT_SIZES[t]
    nblocks = 3 if block > 1 else 96
    raw = rng.integers(0, 256, size=nblocks * size, dtype=np.uint8)
    # keep fp16 scale fields finite and modest: set every fp16 field the layout has to a random value in [-2, 2]
    def half(v): return np.frombuffer(np.array([v], dtype=np.float16).tobytes(), dtype=np.uint8)
    offs = {"Q4_0":[0],"Q4_1":[0,2],"Q5_0":[0],"Q5_1":[0,2],"Q8_0":[0],"Q2_K":[80,82],"Q3_K":[108],"Q4_K":[0,2],"Q5_K":[0,2],"Q6_K":[208]}.get(name, [])
    for b in range(nblocks):
        for o in offs:
            raw[b*size+o:b*size+o+2] = half(rng.uniform(-2, 2))
    if name in ("BF16", "F16"):
        vals = rng.uniform(-3, 3, size=nblocks).astype(np.float32)
        raw = np.frombuffer((vals.astype(np.float16) if name == "F16" else (vals.view(np.uint32) >> 16).astype(np.uint16)).tobytes(), dtype=np.uint8).copy()
    deq = dequantize(raw, t).astype(np.float32).reshape(-1)
    out[name] = {"bytes": base64.b64encode(raw.tobytes()).decode(), "values": base64.b64encode(deq.tobytes()).decode(), "count": int(deq.size)}
print(json.dumps(out))
