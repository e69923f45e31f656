//===- GemmConfigs.h - the GEMM configs the tests build and run ---*- C++ -*-===//
//
// Configs other than the default, each a different path through the
// template: the compile tests build them for every layout without a GPU, the
// GPU tests run them against float64.
//
//===----------------------------------------------------------------------===//
#pragma once

namespace tilejit::testing {

inline constexpr const char *kGemmConfigs[] = {
    "bk=64 bm=128 bn=128 consumers=2 group=8 stages=4",
    "bk=64 bm=64 bn=128 consumers=1 group=4 stages=3",
    "bk=64 bm=256 bn=128 consumers=2 group=8 stages=3", // two 64-row blocks per consumer
    "bk=64 bm=128 bn=64 consumers=2 group=16 stages=6",
    "bk=64 bm=128 bn=192 consumers=2 group=8 stages=4",
    "bk=64 bm=128 bn=256 consumers=2 group=8 inflight=1 stages=4",
    "bk=64 bm=128 bn=128 consumers=2 group=8 pingpong=1 stages=6",
    "bk=64 bm=128 bn=128 consumers=2 group=8 inflight=1 pingpong=1 stages=6",
    "bk=64 bm=64 bn=256 consumers=2 group=4 inflight=1 pingpong=1 stages=5",
    // D through shared memory and TMA stores: four panels, three (an odd
    // count), one consumer, whole tiles per consumer (ping-pong).
    "bk=64 bm=128 bn=256 consumers=2 group=8 stages=4 tmastore=1",
    "bk=64 bm=128 bn=192 consumers=2 group=8 inflight=1 stages=4 tmastore=1",
    "bk=64 bm=64 bn=128 consumers=1 group=4 stages=3 tmastore=1",
    "bk=64 bm=128 bn=128 consumers=2 group=8 pingpong=1 stages=4 tmastore=1",
    // K split over programs, the parts added in a fixed order through a
    // workspace: with TMA stores, with products in flight, one consumer.
    "bk=64 bm=128 bn=256 consumers=2 group=8 splitk=3 stages=4 tmastore=1",
    "bk=64 bm=128 bn=128 consumers=2 group=8 inflight=1 splitk=4 stages=4",
    "bk=64 bm=64 bn=128 consumers=1 group=4 splitk=2 stages=3",
    // Groups of tile columns (raster = 1), also with ping-pong, and a grid
    // of one program per tile.
    "bk=64 bm=128 bn=256 consumers=2 group=8 raster=1 stages=4 tmastore=1",
    "bk=64 bm=128 bn=128 consumers=2 group=3 persistent=0 stages=4",
    "bk=64 bm=128 bn=128 consumers=2 group=2 pingpong=1 raster=1 stages=4",
    // Clusters of two blocks sharing B's tile (multicast): with TMA stores,
    // with products in flight and groups of columns, one consumer.
    "bk=64 bm=128 bn=256 cluster=2 consumers=2 group=8 stages=4 tmastore=1",
    "bk=64 bm=128 bn=128 cluster=2 consumers=2 group=3 inflight=1 raster=1 stages=4",
    "bk=64 bm=64 bn=256 cluster=2 consumers=1 group=8 stages=4",
};

} // namespace tilejit::testing
