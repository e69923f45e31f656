//===- AttentionOrder.h - the order of attention's tiles -----------*- C++ -*-===//
#pragma once

#include "compiler/templates/Kernel.h"
#include "ops/attention/AttentionDecl.h"

namespace tilejit::attention {

/// What of a config orders attn_fwd's tiles: bm query rows a tile; raster
/// (byHead) and raster_heads.
struct ForwardOrder {
  int64_t bm = 128;
  bool byHead = false;
  /// With byHead: the row tiles of this many heads at a time (0 or 1: of
  /// one head).
  int64_t rasterHeads = 0;
};

/// Where tile `t` of attn_fwd's grid lies.
struct TilePlace {
  mlir::Value seq, head, bh, kvHead, q0;
};

/// Tile `t` of `mTiles` row tiles of each of `heads` heads (b * hq; bh is
/// seq * hq + head): bm query rows from q0 of one head of one sequence, the
/// tiles of the last query rows (the most keys under a causal mask) first;
/// by raster 0 that row tile of every head before the next, by raster 1
/// every row tile of one head before the next head (the programs running
/// together then read the same K and V, which L2 keeps), with raster_heads
/// every row tile of a group of heads (the last group smaller where they do
/// not divide the heads), that row tile of each of the group's heads before
/// the next. Unsigned index arithmetic at the builder's insertion point.
TilePlace placeTile(KernelMath &km, const Params &p, const ForwardOrder &o, mlir::Value t,
                    mlir::Value mTiles, mlir::Value heads);

/// What of a config orders attn_bwd's dK/dV tiles (persistent grids'
/// tiles, lpt and lpt_heads) and whether the last key tiles come first
/// (ordered: the fused kernel adding dQ in order).
struct DkvOrder {
  /// Longest first (lpt; persistent grids only).
  bool lpt = false;
  /// With lpt: within groups of this many units (0: across every unit).
  int64_t lptHeads = 0;
  bool ordered = false;
};

/// Where dK/dV tile `pid` of `tiles` lies: its key tile (nTile, of
/// `nTiles` a unit), the part of its group's query heads (of `split`) and
/// its sequence's KV head (bkv, seq * hkv + KV head). A unit is one part of
/// one sequence's KV head: tiles / split / nTiles of them a part. The grid's
/// order: every key tile of one KV head before the next, part j of every
/// sequence's KV heads before part j + 1; with lpt the nTile-th tile of
/// every unit before the next key tile (under a causal mask the first key
/// tiles see the most queries), with lpt_heads so within groups of that
/// many units, the groups in turn (the last one smaller where they do not
/// divide the units); ordered, the key tiles from the last. Unsigned index
/// arithmetic at the builder's insertion point, in `pid`'s type.
struct DkvPlace {
  mlir::Value part, nTile, bkv;
};
DkvPlace placeDkvTile(KernelMath &km, const DkvOrder &o, mlir::Value pid, mlir::Value tiles,
                      mlir::Value nTiles, mlir::Value split);

} // namespace tilejit::attention
