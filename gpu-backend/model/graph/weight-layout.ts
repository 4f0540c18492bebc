/** Host-side re-layouts of Hugging Face weights for the graph's MatMuls. */

/** [out, in] (HF linear layout) -> [in, out] for MatMul. */
export function transpose(w: Float32Array, inDim: number, outDim: number): Float32Array {
  if (w.length !== inDim * outDim) throw new Error(`weight has ${w.length} values, expected ${outDim}x${inDim}`);
  const out = new Float32Array(w.length);
  for (let o = 0; o < outDim; o++) {
    const row = o * inDim;
    for (let i = 0; i < inDim; i++) out[i * outDim + o] = w[row + i]!;
  }
  return out;
}

/** Several [out_k, in] weights -> one [in, sum(out_k)] matrix, so one MatMul computes them all. */
export function concatTransposed(ws: Float32Array[], inDim: number): Float32Array {
  const outs = ws.map((w) => w.length / inDim);
  const total = outs.reduce((a, b) => a + b, 0);
  const out = new Float32Array(inDim * total);
  let col = 0;
  ws.forEach((w, k) => {
    const outDim = outs[k]!;
    for (let o = 0; o < outDim; o++) {
      const row = o * inDim;
      for (let i = 0; i < inDim; i++) out[i * total + col + o] = w[row + i]!;
    }
    col += outDim;
  });
  return out;
}

export function concatVectors(vs: Float32Array[]): Float32Array {
  const out = new Float32Array(vs.reduce((a, v) => a + v.length, 0));
  let off = 0;
  for (const v of vs) {
    out.set(v, off);
    off += v.length;
  }
  return out;
}
