/**
 * How many leading elements two sequences share (block-hash lists, token ids, messages by `===`).
 *
 * @example commonPrefixLength(["a", "b", "c"], ["a", "b", "x"]) // 2
 */
export function commonPrefixLength<T>(a: ArrayLike<T>, b: ArrayLike<T>): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}
