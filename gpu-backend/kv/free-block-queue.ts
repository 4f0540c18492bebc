/**
 * The free block queue: an intrusive doubly-linked list over block ids 0..numBlocks-1, stored in
 * two typed arrays, so push, pop and remove-from-the-middle are O(1) and allocation-free.
 *
 * The queue order is the eviction order: the front is evicted first (least recently used), the
 * back last. `BlockPool` is the only owner; nothing else should link or unlink blocks.
 *
 *   head ──> [5] <──> [2] <──> [9] <── tail        prev/next hold neighbour ids, NONE (-1) at the ends
 */
export class FreeBlockQueue {
  readonly capacity: number;
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  private readonly member: Uint8Array;
  private head = NONE;
  private tail = NONE;
  private size = 0;

  /**
   * Creates a queue over ids `0..capacity-1`; with `filled` (the default) it starts holding every
   * id in ascending order, otherwise empty.
   *
   * @example
   * const q = new FreeBlockQueue(4); // [0, 1, 2, 3]
   * q.popFront();                    // 0
   */
  constructor(capacity: number, filled = true) {
    if (!Number.isInteger(capacity) || capacity < 0) throw new Error(`FreeBlockQueue: bad capacity ${capacity}`);
    this.capacity = capacity;
    this.prev = new Int32Array(capacity).fill(NONE);
    this.next = new Int32Array(capacity).fill(NONE);
    this.member = new Uint8Array(capacity);
    if (filled) for (let id = 0; id < capacity; id++) this.pushBack(id);
  }

  /** Number of blocks in the queue. */
  get length(): number {
    return this.size;
  }

  /** Whether `blockId` is in the queue. @example q.has(3) */
  has(blockId: number): boolean {
    return this.member[blockId] === 1;
  }

  /** The block that would be evicted next, without removing it; `undefined` when empty. */
  peekFront(): number | undefined {
    return this.head === NONE ? undefined : this.head;
  }

  /**
   * Removes and returns the front (least recently used) block; `undefined` when empty.
   *
   * @example const victim = q.popFront();
   */
  popFront(): number | undefined {
    const id = this.head;
    if (id === NONE) return undefined;
    this.unlink(id);
    return id;
  }

  /** Appends a block at the back (evicted last). Throws if it is already queued. @example q.pushBack(7) */
  pushBack(blockId: number): void {
    this.assertAbsent(blockId);
    this.prev[blockId] = this.tail;
    this.next[blockId] = NONE;
    if (this.tail === NONE) this.head = blockId;
    else this.next[this.tail] = blockId;
    this.tail = blockId;
    this.member[blockId] = 1;
    this.size++;
  }

  /** Inserts a block at the front (evicted first). Throws if it is already queued. @example q.pushFront(7) */
  pushFront(blockId: number): void {
    this.assertAbsent(blockId);
    this.next[blockId] = this.head;
    this.prev[blockId] = NONE;
    if (this.head === NONE) this.tail = blockId;
    else this.prev[this.head] = blockId;
    this.head = blockId;
    this.member[blockId] = 1;
    this.size++;
  }

  /** Removes a block from anywhere in the queue in O(1). Throws if it is not queued. @example q.remove(7) */
  remove(blockId: number): void {
    if (!this.has(blockId)) throw new Error(`FreeBlockQueue: block ${blockId} is not in the queue`);
    this.unlink(blockId);
  }

  /** Block ids front to back (allocates; for tests and debugging). @example q.toArray() // [5, 2, 9] */
  toArray(): number[] {
    const out: number[] = [];
    for (let id = this.head; id !== NONE; id = this.next[id]!) out.push(id);
    return out;
  }

  /**
   * Walks the links and throws if they disagree with the membership flags or the size: a broken
   * back-link, a cycle, a member that is not reachable.
   */
  checkIntegrity(): void {
    let count = 0;
    let prev = NONE;
    for (let id = this.head; id !== NONE; id = this.next[id]!) {
      if (id < 0 || id >= this.capacity) throw new Error(`FreeBlockQueue: link to out-of-range block ${id}`);
      if (this.member[id] !== 1) throw new Error(`FreeBlockQueue: linked block ${id} is not flagged as a member`);
      if (this.prev[id] !== prev) throw new Error(`FreeBlockQueue: block ${id} has prev ${this.prev[id]}, expected ${prev}`);
      if (++count > this.size) throw new Error(`FreeBlockQueue: more linked blocks than size ${this.size} (cycle?)`);
      prev = id;
    }
    if (prev !== this.tail) throw new Error(`FreeBlockQueue: tail is ${this.tail}, last linked block is ${prev}`);
    if (count !== this.size) throw new Error(`FreeBlockQueue: ${count} linked blocks, size says ${this.size}`);
    let flagged = 0;
    for (let id = 0; id < this.capacity; id++) flagged += this.member[id]!;
    if (flagged !== this.size) throw new Error(`FreeBlockQueue: ${flagged} flagged members, size says ${this.size}`);
  }

  private unlink(id: number): void {
    const p = this.prev[id]!;
    const n = this.next[id]!;
    if (p === NONE) this.head = n;
    else this.next[p] = n;
    if (n === NONE) this.tail = p;
    else this.prev[n] = p;
    this.prev[id] = NONE;
    this.next[id] = NONE;
    this.member[id] = 0;
    this.size--;
  }

  private assertAbsent(blockId: number): void {
    if (!Number.isInteger(blockId) || blockId < 0 || blockId >= this.capacity) {
      throw new Error(`FreeBlockQueue: block id ${blockId} out of range [0, ${this.capacity})`);
    }
    if (this.member[blockId] === 1) throw new Error(`FreeBlockQueue: block ${blockId} is already in the queue`);
  }
}

const NONE = -1;
