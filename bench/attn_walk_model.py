"""A model of how attention's persistent grids share the tiles of packed sequences
(bench/NOTES.md b32, b33, b35): for each case of bench/attn_packed_shapes.json with ragged
"lengths", the step-times of the slowest program when the tiles are shared out in advance
(the static walk: round j's tiles to the programs in order, odd rounds from the other end),
taken from a counter in the grid's order (take), taken with the tiles past their sequence
passed over, and a perfect share of the tiles with work. No GPU: the work of a tile is
its steps plus a fixed cost, a tile without work a smaller one; the figures are ratios to
set predictions by, not times.

    python3 bench/attn_walk_model.py [--shapes bench/attn_packed_shapes.json] [--programs 132]

The backward's dK/dV grid: per KV head, ceil(longest / 128) key tiles a sequence (the
sequence's KV head's tiles in turn); a tile of keys from n0 sees ceil(len / 64) - n0 / 64
query tiles of 64 under a causal mask (every one without). The forward's grid: per query
head, ceil(longest / 128) row tiles a sequence, the last rows first (raster 1: every row
tile of a head in turn; raster 0: one row tile of every head); a tile sees its key tiles of
128 up to its last row under a causal mask (every one without).
"""
import argparse
import heapq
import json
import math


def slowest(order, programs, cost):
    """The slowest program's total when the programs take `order`'s tiles from a counter,
    each as soon as it is done with its last one."""
    heap = [(0.0, p) for p in range(programs)]
    for w in order:
        t, p = heapq.heappop(heap)
        heapq.heappush(heap, (t + cost(w), p))
    return max(t for t, _ in heap)


def static(order, programs, cost):
    """The slowest program's total when round j's tiles go to the programs in order, odd
    rounds from the other end."""
    load = [0.0] * programs
    for at, w in enumerate(order):
        j, q = divmod(at, programs)
        load[programs - 1 - q if j % 2 else q] += cost(w)
    return max(load)


def backward_tiles(c):
    """Steps of every dK/dV tile in the grid's order (None: past its sequence's keys)."""
    lengths, causal = c["lengths"], c["causal"]
    tiles = math.ceil(max(lengths) / 128)
    out = []
    for n in lengths:
        for _ in range(c["hkv"]):
            for t in range(tiles):
                if t * 128 >= n:
                    out.append(None)
                else:
                    out.append(math.ceil(n / 64) - (2 * t if causal else 0))
    return out


def forward_tiles(c, raster):
    """Key tiles of every forward tile in the grid's order (None: past its sequence's rows)."""
    lengths, causal = c["lengths"], c["causal"]
    tiles = math.ceil(max(lengths) / 128)
    units = [n for n in lengths for _ in range(c["hq"])]

    def work(n, m):
        if m * 128 >= n:
            return None
        return math.ceil(min(n, (m + 1) * 128) / 128) if causal else math.ceil(n / 128)

    out = []
    for at in range(tiles * len(units)):
        if raster:
            unit, from_last = divmod(at, tiles)
        else:
            from_last, unit = divmod(at, len(units))
        out.append(work(units[unit], tiles - 1 - from_last))
    return out


def rows(order, programs, per_tile, empty, passed):
    real = [w for w in order if w is not None]
    cost = lambda w: empty if w is None else per_tile + w
    return {
        "tiles": len(order),
        "share_with_work": len(real) / len(order),
        "static": static(order, programs, cost),
        "take": slowest(order, programs, cost),
        "take_passing_over": slowest(order, programs,
                                     lambda w: passed if w is None else per_tile + w),
        "perfect": sum(per_tile + w for w in real) / programs,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="bench/attn_packed_shapes.json")
    ap.add_argument("--programs", type=int, default=132)
    a = ap.parse_args()
    cases = [c for c in json.load(open(a.shapes))["cases"] if "lengths" in c]
    print(f"{'case':34} {'grid':6} {'tiles':>6} {'work':>5} {'static':>7} {'take':>7} "
          f"{'passing':>7} {'perfect':>7}")
    for c in cases:
        grids = [("bwd", backward_tiles(c), 2.0, 0.5, 0.05)]
        grids += [(f"fwd r{r}", forward_tiles(c, r), 1.0, 0.1, 0.02) for r in (0, 1)]
        for grid, order, per_tile, empty, passed in grids:
            r = rows(order, a.programs, per_tile, empty, passed)
            print(f"{c['name'][:34]:34} {grid:6} {r['tiles']:6d} {r['share_with_work']:5.2f} "
                  f"{r['static']:7.0f} {r['take']:7.0f} {r['take_passing_over']:7.0f} "
                  f"{r['perfect']:7.0f}")


if __name__ == "__main__":
    main()
