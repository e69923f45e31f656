//===- AttentionOrder.h - the order of attn_fwd's tiles ------------*- C++ -*-===//
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

} // namespace tilejit::attention
