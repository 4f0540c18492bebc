import { describe, expect, it } from "vitest";
import { assignBackend, cellOfBackend, cellOrder, EMPTY_CELL_MAP, FIRST_CELL, forgetBackends, rebalance, type CellMap } from "./cells";

function mapOf(n: number, cellBackends: number, model = "m"): CellMap {
  let map = EMPTY_CELL_MAP;
  for (let i = 0; i < n; i++) ({ map } = assignBackend(map, { id: `b${String(i).padStart(4, "0")}`, url: `http://b${i}`, model }, cellBackends));
  return map;
}

describe("pool cells", () => {
  it("fills cells to their size, the first named pool, and keeps a backend where it is", () => {
    const map = mapOf(70, 32);
    expect(map.cells.map((c) => [c.name, c.backends.length])).toEqual([[FIRST_CELL, 32], ["pool-1", 32], ["pool-2", 6]]);
    const again = assignBackend(map, { id: "b0040", url: "http://b40", model: "m" }, 32);
    expect(again.map).toBe(map);
    expect(again.cell).toBe("pool-1");
    // A new url for a known id is kept in its cell.
    const moved = assignBackend(map, { id: "b0040", url: "http://new", model: "m" }, 32);
    expect(moved.cell).toBe("pool-1");
    expect(moved.map.version).toBe(map.version + 1);
  });

  it("joins the emptiest cell of the backend's model, and a new model opens its own cell", () => {
    let map = forgetBackends(mapOf(64, 32), new Set(["b0040", "b0041"]));
    ({ map } = assignBackend(map, { id: "new", url: "http://new", model: "m" }, 32));
    expect(cellOfBackend(map, "new")).toBe("pool-1");
    const other = assignBackend(map, { id: "x", url: "http://x", model: "other" }, 32);
    expect(other.cell).toBe("pool-2");
    expect(other.map.cells.find((c) => c.name === "pool-2")!.model).toBe("other");
  });

  it("merges two small cells of a model, moving the smaller one's backends, and splits an oversized one", () => {
    const gone = new Set(Array.from({ length: 26 }, (_, i) => `b${String(i + 32).padStart(4, "0")}`)); // pool-1 keeps 6
    const thin = forgetBackends(mapOf(64, 32), new Set([...gone, ...Array.from({ length: 14 }, (_, i) => `b${String(i).padStart(4, "0")}`)]));
    const { map, moves } = rebalance(thin, 32);
    expect(map.cells.map((c) => [c.name, c.backends.length])).toEqual([[FIRST_CELL, 24]]);
    expect(moves).toHaveLength(6);
    expect(moves.every((m) => m.from === "pool-1" && m.to === FIRST_CELL)).toBe(true);
    // 18 + 14 = 32 > 0.75 x 32: not merged.
    expect(rebalance(forgetBackends(mapOf(64, 32), new Set(Array.from({ length: 18 }, (_, i) => `b${String(i + 32).padStart(4, "0")}`))), 32).moves).toEqual([]);
    const split = rebalance(mapOf(40, 64), 16);
    expect(split.map.cells.map((c) => c.backends.length)).toEqual([16, 16, 8]);
    expect(split.moves).toHaveLength(24);
    expect(rebalance(split.map, 16).moves).toEqual([]);
  });

  it("orders a trajectory's cells: its pinned backend's first, else by key in proportion to the cells' backends", () => {
    const map = mapOf(96 + 8, 32);
    expect(cellOrder(EMPTY_CELL_MAP, { key: "k" })).toEqual([FIRST_CELL]);
    expect(cellOrder(map, { key: "k", model: "m", pinned: "http://40" })[0]).toBe(cellOrder(map, { key: "k", model: "m" })[0]);
    expect(cellOrder(map, { key: "k", model: "m", pinned: "http://b40" })[0]).toBe("pool-1");
    const first = new Map<string, number>();
    for (let i = 0; i < 20_000; i++) {
      const order = cellOrder(map, { key: `key-${i}`, model: "m" });
      expect(order).toHaveLength(4);
      first.set(order[0]!, (first.get(order[0]!) ?? 0) + 1);
    }
    // 32:32:32:8 backends -> 30.8% each, 7.7%.
    for (const name of [FIRST_CELL, "pool-1", "pool-2"]) expect(first.get(name)! / 20_000).toBeCloseTo(32 / 104, 1);
    expect(first.get("pool-3")! / 20_000).toBeCloseTo(8 / 104, 1);
    // Removing a cell moves only the keys it won.
    const without = forgetBackends(map, new Set(map.cells[3]!.backends.map((b) => b.id)));
    for (let i = 0; i < 2000; i++) {
      const before = cellOrder(map, { key: `key-${i}`, model: "m" })[0];
      if (before !== "pool-3") expect(cellOrder(without, { key: `key-${i}`, model: "m" })[0]).toBe(before);
    }
  });
});
