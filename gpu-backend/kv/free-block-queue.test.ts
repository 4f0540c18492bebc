import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../protocol/random";
import { FreeBlockQueue } from "./free-block-queue";
import { randInt } from "./testing";

function queue(capacity: number, filled = true): FreeBlockQueue {
  const q = new FreeBlockQueue(capacity, filled);
  q.checkIntegrity();
  return q;
}

describe("FreeBlockQueue", () => {
  it("starts with every block in ascending order and pops from the front", () => {
    const q = queue(4);
    expect(q.length).toBe(4);
    expect(q.toArray()).toEqual([0, 1, 2, 3]);
    expect(q.peekFront()).toBe(0);
    expect(q.popFront()).toBe(0);
    q.checkIntegrity();
    expect(q.popFront()).toBe(1);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([2, 3]);
    expect(q.has(0)).toBe(false);
    expect(q.has(2)).toBe(true);
  });

  it("starts empty when asked and returns undefined when popped empty", () => {
    const q = queue(3, false);
    expect(q.length).toBe(0);
    expect(q.popFront()).toBeUndefined();
    expect(q.peekFront()).toBeUndefined();
    q.pushBack(1);
    q.checkIntegrity();
    expect(q.popFront()).toBe(1);
    expect(q.popFront()).toBeUndefined();
    q.checkIntegrity();
  });

  it("pushes to the back and to the front", () => {
    const q = queue(5, false);
    q.pushBack(2);
    q.pushBack(4);
    q.pushFront(0);
    q.pushFront(3);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([3, 0, 2, 4]);
  });

  it("removes from the middle, the head and the tail in O(1)", () => {
    const q = queue(5);
    q.remove(2);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([0, 1, 3, 4]);
    q.remove(0);
    q.checkIntegrity();
    q.remove(4);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([1, 3]);
    q.remove(1);
    q.remove(3);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([]);
    q.pushFront(4);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([4]);
  });

  it("rejects double insertion, removing a non-member and out-of-range ids", () => {
    const q = queue(3);
    expect(() => q.pushBack(1)).toThrow(/already in the queue/);
    expect(() => q.pushFront(1)).toThrow(/already in the queue/);
    q.remove(1);
    expect(() => q.remove(1)).toThrow(/not in the queue/);
    expect(() => q.pushBack(3)).toThrow(/out of range/);
    expect(() => q.pushBack(-1)).toThrow(/out of range/);
    q.checkIntegrity();
    expect(q.toArray()).toEqual([0, 2]);
  });

  it("detects corrupted links", () => {
    const q = queue(3);
    (q as unknown as { next: Int32Array }).next[0] = 2;
    expect(() => q.checkIntegrity()).toThrow(/prev|linked|size/);
  });

  it("matches an array model over random operations", () => {
    const rand = mulberry32(7);
    const n = 64;
    const q = queue(n, false);
    const model: number[] = [];
    for (let step = 0; step < 5000; step++) {
      const op = randInt(rand, 0, 3);
      const id = randInt(rand, 0, n - 1);
      const present = model.includes(id);
      if (op === 0 && !present) {
        q.pushBack(id);
        model.push(id);
      } else if (op === 1 && !present) {
        q.pushFront(id);
        model.unshift(id);
      } else if (op === 2 && present) {
        q.remove(id);
        model.splice(model.indexOf(id), 1);
      } else if (op === 3) {
        expect(q.popFront()).toBe(model.shift());
      }
      q.checkIntegrity();
      expect(q.length).toBe(model.length);
    }
    expect(q.toArray()).toEqual(model);
  });
});
