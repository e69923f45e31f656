//===- Passes.td - tile dialect passes ---------------------------*- tablegen -*-===//
#ifndef TILEJIT_PASSES
#define TILEJIT_PASSES

include "mlir/Pass/PassBase.td"

def TileCheckTarget : Pass<"tile-check-target", "::mlir::ModuleOp"> {
  let summary = "Checks every kernel's configuration against the target GPU";
  let description = [{
    Rejects, with a message naming the kernel and the limit, what the target
    cannot run or what would run badly enough to be a mistake:
    - more than 48 KiB of static shared memory for reductions across warps,
    - a tile whose per-thread fragment exceeds `max-elems-per-thread`
      elements (it would spill registers to local memory),
    - arithmetic on tiles that are not f32 (tile arithmetic is done in f32;
      widen with `arith.extf` first), constant tiles (use `tile.splat`), and
      grid dimensions other than x.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "Target architecture (sm_80, sm_86, sm_89, sm_90, sm_90a)">,
    Option<"maxElemsPerThread", "max-elems-per-thread", "int64_t",
           /*default=*/"64", "Largest per-thread fragment of any tile">
  ];
  let dependentDialects = ["::tilejit::tile::TileDialect"];
}

def TileAllocateShared : Pass<"tile-allocate-shared", "::mlir::ModuleOp"> {
  let summary = "Places each kernel's shared memory";
  let description = [{
    Sets the declared attributes of every `tile.kernel` that say what shared
    memory its operations use, so that no later pass has to work it out
    again: `scratch_bytes`, the scratch of reductions that cross threads (a
    row reduction over more than one warp: one f32 per warp; a column
    reduction over several rows of threads: the whole f32 tile), which every
    reduction of the kernel reuses from offset 0; `cluster_rows`, the rows
    of threads whose results a `tile.reduce` marked `cluster` exchanges with
    the other blocks of the cluster (absent without such a reduction); and,
    for `tile.alloc_ring` / `tile.alloc_barriers`, each one's `offset` in the
    kernel's dynamic shared memory (rings first, each on a 1024-byte
    boundary, then the barriers) and the kernel's `dynamic_smem_bytes` (their
    total plus 1024, as the kernel aligns its base itself).
  }];
  let dependentDialects = ["::tilejit::tile::TileDialect"];
}

def ConvertTileToLLVM : Pass<"convert-tile-to-llvm", "::mlir::ModuleOp"> {
  let summary = "Lowers tile kernels to the LLVM dialect with NVVM operations";
  let description = [{
    Each `tile.kernel` becomes an `llvm.func` marked `nvvm.kernel` (with
    `nvvm.maxntid`, `nvvm.minctasm` and `nvvm.cluster_dim` from its launch
    shape). A memref argument becomes a struct passed by value, a global
    pointer and one `i64` per size; a tile value becomes the calling thread's
    elements as an LLVM vector, in the order the layout
    (`LayoutAttrInterface`) gives them. Tile operations become the per-thread
    code of their layout: masked vector loads and stores, reductions through
    warp shuffles, shared memory and, across a cluster, distributed shared
    memory with transaction barriers. `arith`, `math` and `cf` (`scf` is
    lowered to `cf` first) go through MLIR's own conversions, on tiles as on
    scalars. NVVM operations where MLIR has them; one-instruction inline PTX
    where it does not (loads and stores with cache hints and predicates,
    `st.async`). Needs `tile-allocate-shared` to have run.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "Target architecture (sm_80, sm_86, sm_89, sm_90, sm_90a)">
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect"];
}

def TileLowerToEmitC : Pass<"tile-lower-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lowers tile kernels to EmitC: CUDA C++ over the device library";
  let description = [{
    Each `tile.kernel` becomes an `emitc.func` with the specifiers
    `extern "C" __global__ __launch_bounds__(N)`. A memref argument becomes a
    `tj::View<T, R>` passed by value (pointer and sizes); a tile value becomes
    the calling thread's fragment, a `tj::Frag<T, K>`; tile operations become
    calls into the device header library (`tj::load_tile`, `tj::reduce_row`,
    `tj::add`, ...), with the layout's parameters as template arguments.
    Scalar `arith` and `scf` go through MLIR's own EmitC conversions. A kernel
    that reduces across warps declares `__shared__ float tj_scratch[...]`.
    The module gains `emitc.include` ops for the headers its kernels use.
  }];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // TILEJIT_PASSES
