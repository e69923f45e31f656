//===- TileOps.td - the tile dialect ----------------------------*- tablegen -*-===//
//
// A block-level tile language: one program instance (a thread block) computes
// whole tiles; passes decide how threads share that work.
//
//===----------------------------------------------------------------------===//

#ifndef TILEJIT_TILE_OPS
#define TILEJIT_TILE_OPS

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/FunctionInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpAsmInterface.td"

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

def Tile_Dialect : Dialect {
  let name = "tile";
  let cppNamespace = "::tilejit::tile";
  let summary = "Block-level tile programs for GPU kernels";
  let description = [{
    The `tile` dialect describes what one thread block does with whole tiles.
    Tiles are ranked tensors whose encoding is a layout attribute
    (`#tile.blocked` or `#tile.slice`) that says which thread holds which
    elements, so `arith` and `math` operations apply to them elementwise.
    Global operands are row-major memrefs (dense, or with row strides;
    dynamic sizes and strides allowed);
    loops are `scf.for` with tiles as iteration arguments. A kernel is a
    `tile.kernel` carrying its launch shape and tunable configuration.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect", "::mlir::memref::MemRefDialect"
  ];
}

class Tile_Op<string mnemonic, list<Trait> traits = []>
    : Op<Tile_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Tile_ReduceKind : I32EnumAttr<"ReduceKind", "reduction combiner", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"max", 1>,
    I32EnumAttrCase<"min", 2>
  ]> {
  let cppNamespace = "::tilejit::tile";
}

def Tile_Dim : I32EnumAttr<"Dim", "grid dimension", [
    I32EnumAttrCase<"x", 0>, I32EnumAttrCase<"y", 1>, I32EnumAttrCase<"z", 2>
  ]> {
  let cppNamespace = "::tilejit::tile";
}


//===----------------------------------------------------------------------===//
// Layout interface: which thread holds which elements of a tile
//===----------------------------------------------------------------------===//

def Tile_LayoutAttrInterface : AttrInterface<"LayoutAttrInterface"> {
  let cppNamespace = "::tilejit::tile";
  let description = [{
    The one description of a tile layout that every consumer reads: the
    verifiers and the target check (elements per thread), the templates, the
    lowering to LLVM (the index of each element a thread holds, the runs that
    move as one vector access, the copy that stores a replicated element) and
    the C++ back end (fragment sizes).

    A thread `t` of the block holds `getElemsPerThread(shape)` elements of a
    tile. Element `i` of thread `t` sits at coordinates
    `getThreadBase()(t) + getElemOffset(shape, i)`: a part that depends on the
    thread only (an affine map of `t`) plus a part that depends on the
    element only (constants). Elements come in runs of `getContiguity()`
    consecutive elements along the last dimension, which a thread moves as
    one vector access. Where several threads hold copies of one element, the
    copy whose `getOwnerMap()(t)` results are all zero is the one that stores
    it.
  }];
  let methods = [
    InterfaceMethod<"Elements of a tile of `shape` that one thread holds.",
      "int64_t", "getElemsPerThread", (ins "::llvm::ArrayRef<int64_t>":$shape)>,
    InterfaceMethod<"Threads of the block the layout spreads a tile over.",
      "int64_t", "getNumThreads", (ins)>,
    InterfaceMethod<"Consecutive elements along the last dimension in one run.",
      "int64_t", "getContiguity", (ins)>,
    InterfaceMethod<[{The coordinates of a thread's first element: a map from
      the thread index (one dimension) to one result per tile dimension.}],
      "::mlir::AffineMap", "getThreadBase", (ins)>,
    InterfaceMethod<[{Coordinates of element `i` of a thread relative to its
      first element, in a tile of `shape`.}],
      "::llvm::SmallVector<int64_t>", "getElemOffset",
      (ins "::llvm::ArrayRef<int64_t>":$shape, "int64_t":$i)>,
    InterfaceMethod<[{A map of the thread index whose results are all zero for
      exactly one of the threads that hold copies of an element (no results
      when every element has one holder).}],
      "::mlir::AffineMap", "getOwnerMap", (ins)>
  ];
}

//===----------------------------------------------------------------------===//
// Layout attributes
//===----------------------------------------------------------------------===//

class Tile_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Tile_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Tile_BlockedLayoutAttr : Tile_Attr<"BlockedLayout", "blocked",
    [DeclareAttrInterfaceMethods<Tile_LayoutAttrInterface>]> {
  let summary = "Rows of a 2-D tile spread over groups of threads";
  let description = [{
    Layout of a rank-2 tile `tensor<R x C x T>`. The block's threads form a
    grid of `rowThreads` x `colThreads` (thread `t` sits at row `t / colThreads`
    and lane `t % colThreads`); tile row `r` belongs to thread row `r`, so `R`
    must equal `rowThreads`. Within a row, a thread owns `vec` contiguous
    elements, then skips `colThreads * vec`: lane `l` holds columns
    `(k * colThreads + l) * vec + v` for `k` in `[0, ceil(C / (colThreads * vec)))`
    and `v` in `[0, vec)`. Contiguous runs of `vec` become one vector memory
    access; reductions along a row combine `colThreads` lanes.

    Example: `#tile.blocked<vec = 8, rowThreads = 1, colThreads = 256>` gives a
    256-thread block one row of up to 2048 elements per pass, 16 bytes per
    thread per access for bf16.
  }];
  let parameters = (ins "int64_t":$vec, "int64_t":$rowThreads,
                        "int64_t":$colThreads);
  let assemblyFormat = "`<` `vec` `=` $vec `,` `rowThreads` `=` $rowThreads `,` `colThreads` `=` $colThreads `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of `vec`-wide chunks one thread holds for a row of `cols`.
    int64_t getChunks(int64_t cols) const;
    /// Number of elements one thread holds for a row of `cols`.
    int64_t getElemsPerThread(int64_t cols) const {
      return getChunks(cols) * getVec();
    }
  }];
}

def Tile_SliceLayoutAttr : Tile_Attr<"SliceLayout", "slice",
    [DeclareAttrInterfaceMethods<Tile_LayoutAttrInterface>]> {
  let summary = "The layout left when one dimension of a rank-2 tile is removed";
  let description = [{
    Layout of a rank-1 tile obtained from a rank-2 tile by removing dimension
    `dim`: every thread that held an element of the removed dimension holds a
    copy of the result. `dim = 1` is one value per tile row (a row sum, a
    per-row scale); `dim = 0` is one row of columns, held by each row of
    threads (a weight vector, a column sum).

    The parent is a `#tile.blocked` layout or `#tile.wgmma`. Of `#tile.wgmma`,
    `dim = 1` is the rows of a warpgroup's accumulator (a row max of attention
    scores), of which each thread holds two per 64-row block, with copies in
    the four threads of a quad (the first stores); `dim = 0` is its columns
    (a per-column log-sum-exp, `N` of them, 8 to 256), of which each thread
    holds `N / 4`, the columns it holds of every accumulator row, with copies
    in the 32 threads of the warpgroup that share them (the first warp's
    first quad stores).
  }];
  let parameters = (ins "int64_t":$dim, "::mlir::Attribute":$parent);
  let assemblyFormat = "`<` `dim` `=` $dim `,` `parent` `=` $parent `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The parent when it is #tile.blocked, else null.
    BlockedLayoutAttr getBlockedParent() const {
      return ::llvm::dyn_cast<BlockedLayoutAttr>(getParent());
    }
  }];
}


def Tile_WgmmaLayoutAttr : Tile_Attr<"WgmmaLayout", "wgmma",
    [DeclareAttrInterfaceMethods<Tile_LayoutAttrInterface>]> {
  let summary = "The accumulator of Hopper's warpgroup matrix multiply";
  let description = [{
    Layout of a rank-2 f32 tile `tensor<M x N x f32>` (M a multiple of 64, N
    a multiple of 8 up to 256) held by one warpgroup: 128 consecutive threads
    whose first is a multiple of 128, as `wgmma.mma_async` leaves its
    accumulator. Thread `t` (taken modulo 128) of warp `w = t / 32`, lane
    `l = t % 32`, holds, in each 64-row block `b` and each 8-column block
    `j`, the elements at rows `64 b + 16 w + l / 4 + {0, 8}` and columns
    `8 j + 2 (l % 4) + {0, 1}`: runs of two columns, four elements per 8x8
    block. Every warpgroup of a block computes its own tile in this layout
    (the consumers of a warp-specialized kernel), so a thread's position
    depends only on its index within its warpgroup.
  }];
  let parameters = (ins);
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class Tile_Type<string name, string typeMnemonic> : TypeDef<Tile_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Tile_RingType : Tile_Type<"Ring", "ring"> {
  let summary = "A ring of tiles in shared memory, one per pipeline stage";
  let description = [{
    `stages` tiles of `rows x cols` elements in shared memory, as the
    asynchronous copy unit writes them and the tensor cores read them: rows
    of 128 bytes with the 128-byte swizzle, in panels of 128 bytes' worth of
    columns (P = 64 16-bit or 32 f32 elements) stored one after the other
    (panel `p` holds columns `[P p, P p + P)` of every row). Each stage
    starts on a 1024-byte boundary. `tile-allocate-shared` places it. The
    tensor cores read 16-bit rings only; f32 rings carry f32 tiles to and
    from global memory (`tile.store_ring`, `tile.tma_store`, `tile.tma_load`).
  }];
  let parameters = (ins "int64_t":$stages, "int64_t":$rows, "int64_t":$cols,
                        "::mlir::Type":$elementType);
  let assemblyFormat = "`<` `stages` `=` $stages `,` `rows` `=` $rows `,` `cols` `=` $cols `,` $elementType `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getElementBytes() const { return getElementType().getIntOrFloatBitWidth() / 8; }
    /// Elements of one 128-byte swizzled row of a panel.
    int64_t getPanelCols() const { return 128 / getElementBytes(); }
    int64_t getPanelBytes() const { return getRows() * 128; }
    int64_t getStageBytes() const { return getRows() * getCols() * getElementBytes(); }
    int64_t getBytes() const { return getStages() * getStageBytes(); }
  }];
}

def Tile_BarriersType : Tile_Type<"Barriers", "barriers"> {
  let summary = "A ring of shared-memory transaction barriers (mbarriers)";
  let description = [{
    `count` mbarriers of 8 bytes each, one per pipeline stage; each expects
    the number of arrivals its `tile.alloc_barriers` declares per phase.
  }];
  let parameters = (ins "int64_t":$count);
  let assemblyFormat = "`<` $count `>`";
  let genVerifyDecl = 1;
}

def Tile_WordsType : Tile_Type<"Words", "words"> {
  let summary = "32-bit words of shared memory that one thread writes for the block";
  let description = [{
    `count` 32-bit words (integers) in shared memory. A one-thread region
    (the producer's or the helper's of `tile.warp_specialize`) writes one
    with `tile.set_word` before it arrives on a barrier; the threads that
    wait for that barrier's phase read it with `tile.get_word`: a value
    only that thread knows (a tile taken with `tile.fetch_add`) handed to
    the block.
  }];
  let parameters = (ins "int64_t":$count);
  let assemblyFormat = "`<` $count `>`";
  let genVerifyDecl = 1;
}

def Tile_TensorMapType : Tile_Type<"TensorMap", "tensormap"> {
  let summary = "A TMA descriptor of a global tensor: a kernel argument";
  let description = [{
    A 128-byte `CUtensorMap` made at launch (`cuTensorMapEncodeTiled`) and
    passed by value as a `__grid_constant__` parameter. It describes a
    tensor of `rank` dimensions (2 unless given; sizes and strides given at
    launch; elements out of bounds read as zero) whose innermost dimension is
    contiguous, and the box one copy moves: `rows x cols` elements of the two
    innermost dimensions (one along the others) with the 128-byte swizzle, so
    `cols` is 128 bytes of elements.
  }];
  let parameters = (ins "int64_t":$rows, "int64_t":$cols, "::mlir::Type":$elementType,
                        DefaultValuedParameter<"int64_t", "2">:$rank);
  let assemblyFormat = "`<` `rows` `=` $rows `,` `cols` `=` $cols `,` $elementType (`,` `rank` `=` $rank^)? `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Tile_ElementType : AnyTypeOf<[BF16, F16, F32]>;

def Tile_Tile : Type<And<[
      CPred<"::llvm::isa<::mlir::RankedTensorType>($_self)">,
      CPred<"::tilejit::tile::isTileType($_self)">]>,
    "tile (ranked tensor with a #tile layout encoding)",
    "::mlir::RankedTensorType">;

def Tile_F32Tile : Type<And<[Tile_Tile.predicate,
      CPred<"::llvm::cast<::mlir::RankedTensorType>($_self).getElementType().isF32()">]>,
    "f32 tile", "::mlir::RankedTensorType">;

def Tile_GlobalMemRef : Type<And<[
      CPred<"::llvm::isa<::mlir::MemRefType>($_self)">,
      CPred<"::tilejit::tile::isGlobalMemRef($_self)">]>,
    "row-major memref of bf16, f16 or f32 (dense or with row strides)", "::mlir::MemRefType">;

//===----------------------------------------------------------------------===//
// Kernel
//===----------------------------------------------------------------------===//

def Tile_KernelOp : Tile_Op<"kernel", [
    FunctionOpInterface, IsolatedFromAbove, OpAsmOpInterface,
    AutomaticAllocationScope]> {
  let summary = "A GPU kernel: the program one thread block runs";
  let description = [{
    The entry of a kernel. Arguments are global memrefs (row-major, dense or
    `strided<[..., 1]>` with offset 0; each dynamic size and stride is a
    launch-time value; a launch's strides keep rows apart, each at least the
    next dimension's size times its stride, and are multiples of 16 bytes),
    `f32` scalars and `index` scalars. Memref arguments do not overlap one another: a back end may read
    a memref the kernel never stores to through the read-only cache. The body
    runs once per block.

    `cluster_size` C (1 to 8; sm_90 and later) groups the blocks into
    clusters of C that run at once on neighbouring multiprocessors: a program
    instance is then a cluster, `tile.program_id` and `tile.num_programs`
    count clusters, `tile.cluster_rank` tells the C blocks of one apart, and a
    `tile.reduce` marked `cluster` combines across them.

    `min_blocks` M (optional) asks that M blocks fit on one multiprocessor
    at once: the compiler then gives each thread at most 64K / (M *
    block_threads) registers, spilling if it must (CUDA's
    `__launch_bounds__(block_threads, M)`).

    Launch shape: `block_threads` threads per block. The number of program
    instances (blocks, or clusters) along x is the minimum of the results of
    the affine map `grid`, whose symbols are bound,
    in order, to the launch-time values named by `grid_operands`: pairs
    `(argument, dimension)`, where dimension -1 names an `index` argument
    itself and `d >= 0` names size `d` of a memref argument. `config` holds the
    tunable parameters the kernel was instantiated with, for printing and
    keys; passes do not read it.

    Shared memory is placed by `tile-allocate-shared`, which sets
    `scratch_bytes` (the block's scratch for reductions across threads, at
    offset 0, reused by every reduction) and, in a kernel that reduces across
    a cluster, `cluster_rows` (the rows of threads whose results a cluster
    reduction exchanges); in a kernel with rings or barriers,
    `dynamic_smem_bytes` (the dynamic shared memory each block is launched
    with: the rings and barriers, 1024-byte aligned by the kernel itself).
    The back ends read them; none is set by hand.

    Arguments may also be `!tile.tensormap` (a TMA descriptor passed by
    value).

    ```mlir
    tile.kernel @k(%x: memref<?x4096xbf16>) attributes {
        block_threads = 256 : i64,
        grid = affine_map<()[s0] -> (s0)>, grid_operands = array<i64: 0, 0>} {
      tile.return
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<FunctionType>:$function_type,
                       I64Attr:$block_threads,
                       AffineMapAttr:$grid,
                       DenseI64ArrayAttr:$grid_operands,
                       OptionalAttr<DictionaryAttr>:$config,
                       OptionalAttr<DictArrayAttr>:$arg_attrs,
                       OptionalAttr<DictArrayAttr>:$res_attrs,
                       OptionalAttr<I64Attr>:$cluster_size,
                       OptionalAttr<I64Attr>:$min_blocks,
                       OptionalAttr<I64Attr>:$scratch_bytes,
                       OptionalAttr<I64Attr>:$cluster_rows,
                       OptionalAttr<I64Attr>:$dynamic_smem_bytes);
  let regions = (region MinSizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Region *getCallableRegion() { return &getBody(); }
    ::llvm::ArrayRef<::mlir::Type> getArgumentTypes() {
      return getFunctionType().getInputs();
    }
    ::llvm::ArrayRef<::mlir::Type> getResultTypes() {
      return getFunctionType().getResults();
    }
    static ::llvm::StringRef getDefaultDialect() { return "tile"; }
    bool isDeclaration() { return false; }
    /// Blocks per program instance (1 without clusters).
    int64_t getClusterBlocks() { return getClusterSize() ? *getClusterSize() : 1; }
  }];
}

def Tile_ReturnOp : Tile_Op<"return", [Pure, Terminator, HasParent<"KernelOp">]> {
  let summary = "Ends a kernel";
  let description = [{ Ends the body of a `tile.kernel`; it returns nothing. }];
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Program identity
//===----------------------------------------------------------------------===//

def Tile_ProgramIdOp : Tile_Op<"program_id", [Pure]> {
  let summary = "This program instance's index in the grid";
  let description = [{
    `%i = tile.program_id x` is the block index along grid dimension `x`
    (the cluster index in a kernel with `cluster_size`).
  }];
  let arguments = (ins Tile_Dim:$dim);
  let results = (outs Index:$result);
  let assemblyFormat = "$dim attr-dict";
  let hasVerifier = 1;
}

def Tile_NumProgramsOp : Tile_Op<"num_programs", [Pure]> {
  let summary = "The number of program instances in the grid";
  let description = [{
    `%n = tile.num_programs x` is the grid size along `x` (in clusters in a
    kernel with `cluster_size`); with
    `tile.program_id` it forms persistent loops
    (`scf.for %t = %pid to %ntiles step %n`).
  }];
  let arguments = (ins Tile_Dim:$dim);
  let results = (outs Index:$result);
  let assemblyFormat = "$dim attr-dict";
  let hasVerifier = 1;
}

def Tile_ClusterRankOp : Tile_Op<"cluster_rank", [Pure]> {
  let summary = "This block's rank in its cluster";
  let description = [{
    `%r = tile.cluster_rank` is in [0, cluster_size): which of the blocks of
    one program instance this is. Only in a kernel with `cluster_size`.
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def Tile_LoadOp : Tile_Op<"load", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Loads a tile from global memory, masked at the edges";
  let description = [{
    Reads a tile whose first element sits at `indices` of `source`. The tile
    covers the trailing dimensions of `source` (its rank may be lower than the
    memref's; leading indices then select a single row). Elements that fall
    outside `source` are not read; they take the value `padding` (default 0,
    rounded to the memory's element type), so a masked tile can enter a sum
    as is, or a max with `padding = -inf`.
    `streaming` marks data read once: it bypasses L1 allocation.

    The tile has the memory's element type, or f32 from bf16/f16 memory: a
    widening load, exact, as `arith.extf` of the narrow tile would be.
    Canonicalization folds that `arith.extf` into the load, so the elements
    are widened as they arrive and the narrow tile never exists.

    ```mlir
    %t = tile.load %x[%row, %c0] : memref<?x4096xbf16> -> tensor<1x4096xbf16, #L>
    %f = tile.load %x[%row, %c0] : memref<?x4096xbf16> -> tensor<1x4096xf32, #L>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$source, Variadic<Index>:$indices,
                       OptionalAttr<F64Attr>:$padding, UnitAttr:$streaming);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = [{
    $source `[` $indices `]` attr-dict `:` type($source) `->` type($result)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Tile_LoadWordOp : Tile_Op<"load_word", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Reads a 32-bit integer from global memory, the same in every thread";
  let description = [{
    The signed 32-bit integer whose bits are the word at `indices` of
    `source` (an f32 memref whose words hold integers, as for `tile.flag_wait`),
    as an index. Every thread reads it (one cached load). It reads what the
    kernel's launch left there: offsets into packed sequences
    (`cu_seqlens`), which no program writes. Indices past the memref's end
    are the caller's error.

    ```mlir
    %start = tile.load_word %cu[%seq] : memref<?xf32>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$source, Variadic<Index>:$indices);
  let results = (outs Index:$result);
  let assemblyFormat = "$source `[` $indices `]` attr-dict `:` type($source)";
  let hasVerifier = 1;
}

def Tile_NarrowOp : Tile_Op<"narrow", [Pure, AllTypesMatch<["source", "result"]>]> {
  let summary = "The rows [start, start + size) of a global memref's first dimension";
  let description = [{
    A view of `source` whose first index runs over `size` rows from row
    `start` on: row i of the result is row start + i of the source. Loads and
    stores through it are masked at its end, so a program can write the
    rows of one sequence of a packed batch and none of the next one's. The
    view never reaches outside the source: its rows are cut at the source's
    end, and it has none where `start` lies outside the source or `size` is
    negative (offsets read from memory may be anything). The first dimension
    must be dynamic; the others, and the row strides, stay as they are.

    ```mlir
    %mine = tile.narrow %o[%start, %len] : memref<?x4096xbf16>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$source, Index:$start, Index:$size);
  let results = (outs Tile_GlobalMemRef:$result);
  let assemblyFormat = "$source `[` $start `,` $size `]` attr-dict `:` type($source)";
  let hasVerifier = 1;
}

def Tile_StoreOp : Tile_Op<"store", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Stores a tile to global memory, masked at the edges";
  let description = [{
    Writes `value` with its first element at `indices` of `dest`; elements
    outside `dest` are not written. When a layout holds copies of an element
    in several threads (`#tile.slice`), exactly one of them writes it.
    `streaming` marks data not read again soon (an evict-first store).

    The tile has the memory's element type, or is f32 into bf16/f16 memory:
    a narrowing store, rounding to nearest even as `arith.truncf` does.
    Canonicalization folds such a `arith.truncf` of the stored value into the
    store (two elements are then rounded and packed by one instruction).

    With `add` (f32 tiles into f32 memory), each element is added to what
    `dest` holds, atomically (`red.global.add`): programs may add into the
    same elements in any order; the sum's rounding then depends on it.

    ```mlir
    tile.store %y, %out[%row, %c0] : tensor<1x4096xbf16, #L>, memref<?x4096xbf16>
    tile.store %f, %out[%row, %c0] : tensor<1x4096xf32, #L>, memref<?x4096xbf16>
    tile.store %g, %acc[%row, %c0] {add} : tensor<64x64xf32, #tile.wgmma>, memref<?x128xf32>
    ```
  }];
  let arguments = (ins Tile_Tile:$value, Tile_GlobalMemRef:$dest,
                       Variadic<Index>:$indices, UnitAttr:$streaming, UnitAttr:$add);
  let assemblyFormat = [{
    $value `,` $dest `[` $indices `]` attr-dict `:` type($value) `,` type($dest)
  }];
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

//===----------------------------------------------------------------------===//
// Tile arithmetic that arith/math do not cover
//===----------------------------------------------------------------------===//

def Tile_ReduceOp : Tile_Op<"reduce", [Pure]> {
  let summary = "Reduces a rank-2 f32 tile along one dimension";
  let description = [{
    Combines the elements of `operand` along `dim` with `kind`. With
    `cluster` (rows only, `dim = 1`), the rows are combined across the blocks
    of the cluster too, in rank order, and every block receives the same
    result: a row split over a cluster reduces as one. The result has
    the operand's shape without `dim` and the layout
    `#tile.slice<dim = dim, parent = operand's layout>`: every thread that held
    part of a reduced row or column receives the whole result. Reductions are
    done in f32 only (the operand must be f32), in a fixed order, so the same
    inputs always give the same bits.

    ```mlir
    %s = tile.reduce sum %sq {dim = 1 : i64}
        : tensor<1x4096xf32, #L> -> tensor<1xf32, #tile.slice<dim = 1, parent = #L>>
    ```
  }];
  let arguments = (ins Tile_ReduceKind:$kind, Tile_F32Tile:$operand,
                       I64Attr:$dim, UnitAttr:$cluster);
  let results = (outs Tile_F32Tile:$result);
  let assemblyFormat = "$kind $operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_BroadcastOp : Tile_Op<"broadcast", [Pure]> {
  let summary = "Expands a rank-1 slice tile back to its rank-2 parent";
  let description = [{
    The inverse of a reduction's shape change: a tile with layout
    `#tile.slice<dim = d, parent = #L>` becomes a rank-2 tile with layout `#L`
    whose every element along `d` equals the operand's element.

    ```mlir
    %b = tile.broadcast %r : tensor<1xf32, #S> -> tensor<1x4096xf32, #L>
    ```
  }];
  let arguments = (ins Tile_Tile:$operand);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = "$operand attr-dict `:` type($operand) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_SplatOp : Tile_Op<"splat", [Pure]> {
  let summary = "A tile whose every element is one scalar";
  let description = [{
    ```mlir
    %e = tile.splat %eps : f32 -> tensor<1xf32, #S>
    ```
  }];
  let arguments = (ins AnyTypeOf<[BF16, F16, F32, I32]>:$value);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = "$value attr-dict `:` type($value) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_IotaOp : Tile_Op<"iota", [Pure]> {
  let summary = "A tile of i32 whose elements are their own coordinate along `dim`";
  let description = [{
    Each element of the result is its index along dimension `dim` of the tile
    (a row or column number within the tile). With `arith` on i32 tiles and
    `arith.select` it forms masks: a causal mask compares the rows plus the
    tile's first row with the columns plus its first column.

    ```mlir
    %cols = tile.iota {dim = 1 : i64} : tensor<64x128xi32, #tile.wgmma>
    ```
  }];
  let arguments = (ins I64Attr:$dim);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shared memory, barriers and asynchronous copies (sm_90)
//===----------------------------------------------------------------------===//

def Tile_AllocRingOp : Tile_Op<"alloc_ring"> {
  let summary = "Allocates a ring of shared-memory tiles";
  let description = [{
    ```mlir
    %a = tile.alloc_ring : !tile.ring<stages = 4, rows = 128, cols = 64, bf16>
    ```
    At the top level of a kernel. `offset` (bytes from the kernel's aligned
    dynamic shared memory) is set by `tile-allocate-shared`.
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset);
  let results = (outs Tile_RingType:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_AllocBarriersOp : Tile_Op<"alloc_barriers"> {
  let summary = "Allocates and initializes a ring of mbarriers";
  let description = [{
    ```mlir
    %full = tile.alloc_barriers {arrivals = 2} : !tile.barriers<4>
    ```
    At the top level of a kernel, before any warp-specialized region: every
    thread of the block passes it, and it returns once the barriers are
    initialized (one thread initializes them, then the block synchronizes).
    Each barrier completes a phase after `arrivals` arrivals and all the
    bytes the arrivals announced. `offset` is set by `tile-allocate-shared`.
  }];
  let arguments = (ins I64Attr:$arrivals, OptionalAttr<I64Attr>:$offset);
  let results = (outs Tile_BarriersType:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_AllocWordsOp : Tile_Op<"alloc_words"> {
  let summary = "Allocates 32-bit words of shared memory";
  let description = [{
    ```mlir
    %slots = tile.alloc_words : !tile.words<2>
    ```
    At the top level of a kernel, before any warp-specialized region. The
    words hold nothing until written. `offset` is set by
    `tile-allocate-shared` (after the rings and barriers).
  }];
  let arguments = (ins OptionalAttr<I64Attr>:$offset);
  let results = (outs Tile_WordsType:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_SetWordOp : Tile_Op<"set_word"> {
  let summary = "Writes a word of shared memory (one thread)";
  let description = [{
    In the producer's or the helper's region of `tile.warp_specialize` (one
    thread): stores the low 32 bits of `value` into word `index` of
    `words`. A later `tile.barrier_arrive` of the same thread publishes it
    to the threads that wait for that phase (the arrival releases and the
    wait acquires at CTA scope).

    ```mlir
    tile.set_word %slots[%k], %tile : !tile.words<2>
    ```
  }];
  let arguments = (ins Tile_WordsType:$words, Index:$index, Index:$value);
  let assemblyFormat = "$words `[` $index `]` `,` $value attr-dict `:` type($words)";
  let hasVerifier = 1;
}

def Tile_GetWordOp : Tile_Op<"get_word", [
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Reads words of shared memory, the same in every thread";
  let description = [{
    In a consumer region of `tile.warp_specialize` (or the helper's): words
    `indices` of `words`, each as an unsigned 32-bit integer widened to an
    index (a count or a place: known below 2^32, the index arithmetic on it
    narrows), one result a word. Every thread of the warpgroup reads them,
    then the warpgroup meets once, so that an arrival after it (its first
    thread's) tells that the whole warpgroup has read them and their writer
    may write them again; the helper's one thread reads them alone. Read
    after waiting for the barrier phase its writer arrived on after
    `tile.set_word`. Words read together cost one meeting, where one op a
    word would cost one each. (Without declared effects, it is neither
    moved nor merged with another read.)

    ```mlir
    %tile = tile.get_word %slots[%k] : !tile.words<2>
    %seq, %head = tile.get_word %slots[%i, %j] : !tile.words<10>
    ```
  }];
  let arguments = (ins Tile_WordsType:$words, Variadic<Index>:$indices);
  let results = (outs Variadic<Index>:$values);
  let assemblyFormat = "$words `[` $indices `]` attr-dict `:` type($words)";
  let hasVerifier = 1;
}

def Tile_FetchAddOp : Tile_Op<"fetch_add", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Adds to a word of global memory atomically, returning what it held";
  let description = [{
    In the producer's or the helper's region of `tile.warp_specialize` (one
    thread): adds the low 32 bits of `value` to the 32-bit integer word at
    `indices` of `counter` (an f32 memref whose words hold integers, as for
    `tile.flag_wait`: a zeroed buffer holds 0) in one atomic step at GPU
    scope (relaxed: it orders no other access), and returns the word's
    value before the addition, widened as an unsigned integer. Programs of a
    persistent grid take their work items from a counter zeroed before the
    launch this way: every value once, in the order the programs ask.

    ```mlir
    %tile = tile.fetch_add %counter[%c0], %c1 : memref<?xf32>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$counter, Variadic<Index>:$indices, Index:$value);
  let results = (outs Index:$result);
  let assemblyFormat = "$counter `[` $indices `]` `,` $value attr-dict `:` type($counter)";
  let hasVerifier = 1;
}

def Tile_BarrierWaitOp : Tile_Op<"barrier_wait"> {
  let summary = "Waits for a phase of one barrier of a ring to complete";
  let description = [{
    Waits until the phase of barrier `index` whose parity is the low bit of
    `parity` has completed. A barrier starts in phase 0, so a wait for
    parity 1 on a fresh barrier returns at once (a producer's first pass
    through an empty ring).
  }];
  let arguments = (ins Tile_BarriersType:$barriers, Index:$index, Index:$parity);
  let assemblyFormat = "$barriers `[` $index `]` `,` $parity attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_BarrierArriveOp : Tile_Op<"barrier_arrive"> {
  let summary = "Arrives once on one barrier of a ring";
  let description = [{
    In a warp-specialized region: the group that runs the region (a consumer
    warpgroup, the producer's one thread or the helper's) arrives once on
    barrier `index`,
    after every thread of the group has reached this point in program order
    (a consumer's `tile.dot` has completed its reads of shared memory by
    then).

    With `cluster` (in a kernel with `cluster_size`), it arrives once on
    barrier `index` of every block of the cluster, its own included (with
    `mbarrier.arrive`'s default release at CTA scope, which orders the
    tensor cores' completed reads of the stage before it): a stage that
    multicast copies fill in every block is free only once every block's
    consumers are done with it.
  }];
  let arguments = (ins Tile_BarriersType:$barriers, Index:$index, UnitAttr:$cluster);
  let assemblyFormat = "$barriers `[` $index `]` attr-dict `:` type($barriers)";
  let hasVerifier = 1;
}

def Tile_TmaLoadOp : Tile_Op<"tma_load"> {
  let summary = "Copies a tile from global memory into a ring stage with TMA";
  let description = [{
    In a producer region. Announces the stage's bytes on barrier `barrier` of
    `barriers` (one arrival) and starts the copies of the `rows x cols` tile
    whose first element is at (`row`, `col`) of the tensor `map` describes
    into stage `stage` of `ring`, one copy per 128-byte panel. The barrier's
    phase completes when the bytes have landed. Elements outside the tensor
    read as zero.

    A tensor of rank 3 to 5 (a head and a batch index beside the rows and
    columns, as attention's `[batch, seq, heads, dim]` tensors) takes its
    outer coordinates after `at`, innermost first; the box is one element
    deep along them.

    With `multicast = N` (in a kernel with `cluster_size = N`) the blocks of
    a cluster share the tile: its boxes (the map's rows, which divide the
    ring's, by a panel; in order, row blocks outer) fall in N equal parts,
    the block of cluster rank r copies part r into the stage of every block
    of the cluster, and each block announces the whole stage's bytes on its
    own barrier, which completes when every part has landed.

    ```mlir
    tile.tma_load %k[%row, %c0] at [%head, %batch], %ring[%s], %full[%s]
        : !tile.tensormap<rows = 128, cols = 64, bf16>, !tile.ring<...>, !tile.barriers<2>
    ```
  }];
  let arguments = (ins Tile_TensorMapType:$map, Index:$row, Index:$col,
                       Variadic<Index>:$outer,
                       Tile_RingType:$ring, Index:$stage,
                       Tile_BarriersType:$barriers, Index:$barrier,
                       OptionalAttr<I64Attr>:$multicast);
  let assemblyFormat = [{
    $map `[` $row `,` $col `]` (`at` ` ` `[` $outer^ `]`)? `,` $ring `[` $stage `]` `,`
    $barriers `[` $barrier `]` attr-dict `:` type($map) `,` type($ring) `,` type($barriers)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$map, "::mlir::Value":$row, "::mlir::Value":$col,
                   "::mlir::Value":$ring, "::mlir::Value":$stage, "::mlir::Value":$barriers,
                   "::mlir::Value":$barrier), [{
      build($_builder, $_state, map, row, col, ::mlir::ValueRange{}, ring, stage, barriers,
            barrier, nullptr);
    }]>,
    OpBuilder<(ins "::mlir::Value":$map, "::mlir::Value":$row, "::mlir::Value":$col,
                   "::mlir::ValueRange":$outer, "::mlir::Value":$ring, "::mlir::Value":$stage,
                   "::mlir::Value":$barriers, "::mlir::Value":$barrier), [{
      build($_builder, $_state, map, row, col, outer, ring, stage, barriers, barrier, nullptr);
    }]>
  ];
  let hasVerifier = 1;
}

def Tile_StoreRingOp : Tile_Op<"store_ring"> {
  let summary = "Stores a warpgroup's tile from registers into a ring stage";
  let description = [{
    Writes `value` (16-bit or f32 elements, `#tile.wgmma`, as many columns
    as the ring has) into stage `stage` of `ring`, its first row at row `row`
    of the stage, where a TMA copy would have put those elements (panels,
    128-byte swizzle), so that `tile.dot` can read the stage as an operand:
    an accumulator's tile (the gradient of attention's scores) becomes the A
    or B of another product (sm_90: stmatrix), or `tile.tma_store` copies it
    out (f32: one 8-byte store per pair of a row's elements). The writes are then made
    visible to the tensor cores' reads (`fence.proxy.async`), and every
    thread of the warpgroup has written before any goes on (a barrier of
    its 128 threads); a product of another warpgroup may read them once
    that warpgroup has synchronized with this one (a barrier this one
    arrives on after the store). 16-bit tiles: columns a multiple of 16.

    With `col`, the tile may be narrower than the stage: its columns go to
    the stage's columns from `col` (a multiple of 8 for 16-bit tiles, of 2
    for f32, the tile's columns inside the stage from there), so that two
    warpgroups can each write part of a stage's columns.

    With `fragments` (f32, no `col`), the stage's bytes from row `row` hold
    the tile in the order of the threads' registers instead: chunk j of
    four elements of the warpgroup's thread t at 16 * (128 j + t) bytes (one
    16-byte store each, consecutive threads side by side), a layout only
    `tile.load_fragments` reads back, after `tile.bulk_reduce` or a copy
    carried it to global memory as it is.

    ```mlir
    tile.store_ring %ds, %r[%s, %row]
        : tensor<64x64xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 128, cols = 64, bf16>
    ```
  }];
  let arguments = (ins Tile_Tile:$value, Tile_RingType:$ring, Index:$stage, Index:$row,
                       Optional<Index>:$col, UnitAttr:$fragments);
  let assemblyFormat = [{
    $value `,` $ring `[` $stage `,` $row (`,` $col^)? `]` attr-dict `:` type($value) `,` type($ring)
  }];
  let builders = [
    // Without a column offset.
    OpBuilder<(ins "::mlir::Value":$value, "::mlir::Value":$ring, "::mlir::Value":$stage,
                   "::mlir::Value":$row), [{
      build($_builder, $_state, value, ring, stage, row, ::mlir::Value(), false);
    }]>
  ];
  let hasVerifier = 1;
}

def Tile_LoadRingOp : Tile_Op<"load_ring"> {
  let summary = "Reads one row of a ring stage into registers";
  let description = [{
    Reads columns `[col, col + N)` (`col` 0 when left out, else a multiple
    of a 16-byte chunk's elements) of row `row` of stage `stage` of `ring`
    (as a TMA copy placed them: panels, 128-byte swizzle) into a rank-1 tile
    of `N` elements of the ring's type, in any layout (each thread reads the
    elements it holds; a `#tile.slice` of `#tile.wgmma`'s columns gives every
    column of an accumulator its value). For values a producer copies in
    beside a product's operands, as attention's backward pass does with the
    log-sum-exp and D of a tile of queries: read where they are used, from
    shared memory, instead of from global memory ahead of the wait.

    The reads keep their place in program order; the stage must be whole
    (its barrier waited for) before them.

    ```mlir
    %lse = tile.load_ring %r[%s, %c0]
        : !tile.ring<stages = 2, rows = 8, cols = 64, f32> -> tensor<64xf32, #tile.slice<dim = 0, parent = #tile.wgmma>>
    ```
  }];
  let arguments = (ins Tile_RingType:$ring, Index:$stage, Index:$row, Optional<Index>:$col);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = [{
    $ring `[` $stage `,` $row (`,` $col^)? `]` attr-dict `:` type($ring) `->` type($result)
  }];
  let builders = [
    // Without a column offset.
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$ring, "::mlir::Value":$stage,
                   "::mlir::Value":$row), [{
      build($_builder, $_state, result, ring, stage, row, ::mlir::Value());
    }]>
  ];
  let hasVerifier = 1;
}

def Tile_TmaStoreOp : Tile_Op<"tma_store"> {
  let summary = "Copies a ring stage to global memory with TMA";
  let description = [{
    In a consumer region of `tile.warp_specialize`, after the warpgroup
    wrote stage `stage` of `ring` (`tile.store_ring`): one thread of the
    warpgroup (in the helper region, its one thread, once the stage's
    writers said so on a barrier) starts the copies of the stage (one per 128-byte panel) to the
    `rows x cols` tile whose first element is at (`row`, `col`) of the tensor
    `map` describes, and closes them into one group of its bulk copies
    (`cp.async.bulk.tensor` ... `.bulk_group`, `cp.async.bulk.commit_group`).
    Elements outside the tensor are not written, so a tile at the edge needs
    no mask. The copy reads the stage after the op returns: the stage may be
    written again only after a `tile.tma_store_wait {read}` has seen the
    group done.

    A tensor of rank 3 to 5 takes its outer coordinates after `at`,
    innermost first, as `tile.tma_load`. With `reduce`, the copies add the
    stage's elements to what the tensor holds instead of replacing it
    (`cp.reduce.async.bulk.tensor` ... `.add`), each element's addition
    atomic, so that programs may add into the same tile in any order: f32
    sums of attention's dQ over key tiles.

    ```mlir
    tile.tma_store %d[%s], %map[%row, %col]
        : !tile.ring<stages = 4, rows = 64, cols = 64, bf16>, !tile.tensormap<rows = 64, cols = 64, bf16>
    tile.tma_store %sums[%s], %map[%row, %col] at [%head, %batch] {reduce}
        : !tile.ring<stages = 2, rows = 64, cols = 64, f32>,
          !tile.tensormap<rows = 64, cols = 32, f32, rank = 4>
    ```
  }];
  let arguments = (ins Tile_RingType:$ring, Index:$stage, Tile_TensorMapType:$map,
                       Index:$row, Index:$col, Variadic<Index>:$outer, UnitAttr:$reduce);
  let assemblyFormat = [{
    $ring `[` $stage `]` `,` $map `[` $row `,` $col `]` (`at` ` ` `[` $outer^ `]`)? attr-dict
    `:` type($ring) `,` type($map)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$ring, "::mlir::Value":$stage, "::mlir::Value":$map,
                   "::mlir::Value":$row, "::mlir::Value":$col), [{
      build($_builder, $_state, ring, stage, map, row, col, ::mlir::ValueRange{}, false);
    }]>
  ];
  let hasVerifier = 1;
}

def Tile_BulkReduceOp : Tile_Op<"bulk_reduce"> {
  let summary = "Adds a ring stage's bytes into global memory as they are, with one bulk copy";
  let description = [{
    As `tile.tma_store {reduce}`, without a tensor map: one thread of the
    warpgroup (in the helper region, its one thread) starts one bulk copy
    that adds the f32 elements of stage `stage` of `ring`, all of its
    rows x cols in the stage's byte order, to as many consecutive elements
    of `dest` (dense rows) from the one at `indices` (its offset is linear
    in them: the last may run past its dimension into the rows after),
    each addition atomic
    (`cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32`), and
    closes it into a group of its bulk copies; `tile.tma_store_wait` waits
    for it. A stage written with `tile.store_ring {fragments}` thus adds a
    tile in its registers' order into sums that `tile.load_fragments`
    reads. The first element's address and the stage's bytes are
    multiples of 16; nothing is masked (the sums are padded).

    ```mlir
    tile.bulk_reduce %part[%s], %sums[%block, %c0]
        : !tile.ring<stages = 2, rows = 64, cols = 64, f32>, memref<?x4096xf32>
    ```
  }];
  let arguments = (ins Tile_RingType:$ring, Index:$stage, Tile_GlobalMemRef:$dest,
                       Variadic<Index>:$indices);
  let assemblyFormat = [{
    $ring `[` $stage `]` `,` $dest `[` $indices `]` attr-dict `:` type($ring) `,` type($dest)
  }];
  let hasVerifier = 1;
}

def Tile_LoadFragmentsOp : Tile_Op<"load_fragments", [
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>]> {
  let summary = "Loads a #tile.wgmma f32 tile stored in the order of its threads' registers";
  let description = [{
    Reads the tile `tile.store_ring {fragments}` wrote (and `tile.bulk_reduce`
    added into global memory) from the consecutive elements of `source`
    (dense rows) from the one at `indices` (as for `tile.bulk_reduce`, the
    last may run past its dimension): chunk j of four elements of the warpgroup's
    thread t at element 4 * (128 j + t) from there (one 16-byte load each,
    consecutive threads side by side). Nothing is masked.

    ```mlir
    %part = tile.load_fragments %sums[%block, %c0] : memref<?x4096xf32> -> tensor<64x64xf32, #tile.wgmma>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$source, Variadic<Index>:$indices);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = [{
    $source `[` $indices `]` attr-dict `:` type($source) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_TmaStoreWaitOp : Tile_Op<"tma_store_wait"> {
  let summary = "Waits until at most `pending` of the warpgroup's TMA stores are running";
  let description = [{
    In a consumer region: the thread that started the warpgroup's
    `tile.tma_store` copies waits until at most the `pending` groups started
    last are incomplete, then the warpgroup synchronizes (a barrier of its
    128 threads), so that every thread may go on. In the helper region its
    one thread waits for its own copies, with no warpgroup to meet. With `read`, a group is
    complete once its copies have read shared memory (its stage may be
    written again); without, once their writes are done and visible.

    ```mlir
    tile.tma_store_wait {pending = 1 : i64, read}
    ```
  }];
  let arguments = (ins I64Attr:$pending, UnitAttr:$read);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Tile_FlagWaitOp : Tile_Op<"flag_wait"> {
  let summary = "Waits until a flag word in global memory holds a value";
  let description = [{
    In a consumer region of `tile.warp_specialize`: one thread of the
    warpgroup reads the 32-bit word at `indices` of `flags` (an f32 memref
    whose words hold integers, as bits: a zeroed buffer holds 0) with
    acquire semantics at GPU scope until it equals `value`, then the
    warpgroup synchronizes. Every write the warpgroup that stored `value`
    (`tile.flag_set`) made before it is then visible to every thread of this
    one, on any multiprocessor. Splits of a reduction hand their partial
    sums on this way in a fixed order. In the helper region its one thread
    spins, with no warpgroup to meet. With `async_proxy`, what the thread
    does next to global memory through TMA (a reduction into what the flag
    guards) is ordered after the acquire too (`fence.proxy.async.global`).

    ```mlir
    tile.flag_wait %flags[%tile, %c], %split : memref<?x2xf32>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$flags, Variadic<Index>:$indices, Index:$value,
                       UnitAttr:$async_proxy);
  let assemblyFormat = "$flags `[` $indices `]` `,` $value attr-dict `:` type($flags)";
  let hasVerifier = 1;
}

def Tile_FlagSetOp : Tile_Op<"flag_set"> {
  let summary = "Stores a value into a flag word, after the warpgroup's writes";
  let description = [{
    In a consumer region: the warpgroup synchronizes, then one thread makes
    its writes and those the warpgroup made before the op visible at GPU
    scope (`fence.acq_rel.gpu`) and stores `value` into the 32-bit word at
    `indices` of `flags` (see `tile.flag_wait`); in the helper region its
    one thread does, after its own writes (its TMA stores waited for
    whole). With `async_proxy`, the thread's TMA writes to global memory
    (waited for whole) are ordered before the release too
    (`fence.proxy.async.global` first).

    ```mlir
    tile.flag_set %flags[%tile, %c], %next : memref<?x2xf32>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$flags, Variadic<Index>:$indices, Index:$value,
                       UnitAttr:$async_proxy);
  let assemblyFormat = "$flags `[` $indices `]` `,` $value attr-dict `:` type($flags)";
  let hasVerifier = 1;
}

def Tile_SliceOp : Tile_Op<"slice", [Pure]> {
  let summary = "A rectangular part of a #tile.wgmma tile, with no data movement";
  let description = [{
    The `rows x cols` part of `source` whose first element is at `offsets`:
    each thread keeps the elements of the part it already holds, so the
    offsets are whole 64-row blocks and 8-column groups of the layout and
    the part is itself a #tile.wgmma tile. An epilogue stores a wide
    accumulator a panel at a time this way.

    ```mlir
    %p = tile.slice %acc [0, 64] : tensor<64x256xbf16, #tile.wgmma> -> tensor<64x64xbf16, #tile.wgmma>
    ```
  }];
  let arguments = (ins Tile_Tile:$source, DenseI64ArrayAttr:$offsets);
  let results = (outs Tile_Tile:$result);
  let assemblyFormat = [{
    $source $offsets attr-dict `:` type($source) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_DotOp : Tile_Op<"dot"> {
  let summary = "acc + A B on the tensor cores, A and B in shared memory";
  let description = [{
    `acc` (`M x N` f32, `#tile.wgmma`) plus the product of `A` (`M x K`) and
    `B` (`K x N`), both read from a stage of a ring, run by the warpgroup that
    executes it (on sm_90a: `wgmma.mma_async`, waited for before the result
    is available; on other targets: `ldmatrix` of the swizzled stages into
    the fragments of `mma.sync.m16n8k16`, whose accumulator fragment is, warp
    by warp, the `#tile.wgmma` layout's 16 x 8 pattern). `K` is the stages'
    depth along the reduction.

    Storage of A, stage `a_stage` of `a`: with `a_mn_major` false the ring
    rows are A's rows (`K` = the ring's cols) and the product reads rows
    `[a_offset, a_offset + M)`; with it true the ring holds A transposed
    (`K` rows, A's rows as columns) and the product reads columns
    `[a_offset, a_offset + M)`. Likewise B: with `b_mn_major` false the ring
    holds B transposed (`N x K`: each of B's columns a row, as a weight of
    `F.linear`), else `K x N` as is; `b_offset` selects B's columns.
    Offsets are multiples of 64 along a panelled dimension and of 8 along
    rows.

    With `async` the product is started and not waited for: its result is
    pending, and may only pass (through loop-carried values) to a
    `tile.dot_wait`, which returns it complete. (sm_90a only.) The warpgroup meanwhile runs
    other code (the softmax of the previous tile of attention).

    With `overwrite` the result is `A B` alone: `acc`'s values are not read
    (only its type), so no zeros are written to the accumulator's registers
    first (on sm_90a the first step of K runs with the scale of D at 0). A
    product started while others still run then needs no registers of its
    own before it begins, which lets ptxas keep the products in flight
    where zeroed registers beside them would not fit.
  }];
  let arguments = (ins Tile_RingType:$a, Index:$a_stage, Index:$a_offset,
                       Tile_RingType:$b, Index:$b_stage, Index:$b_offset,
                       Tile_F32Tile:$acc,
                       DefaultValuedAttr<BoolAttr, "false">:$a_mn_major,
                       DefaultValuedAttr<BoolAttr, "false">:$b_mn_major,
                       UnitAttr:$async, UnitAttr:$overwrite);
  let results = (outs Tile_F32Tile:$result);
  let assemblyFormat = [{
    $a `[` $a_stage `,` $a_offset `]` `,` $b `[` $b_stage `,` $b_offset `]` `,` $acc attr-dict
    `:` type($a) `,` type($b) `,` type($acc) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_DotRegOp : Tile_Op<"dot_reg"> {
  let summary = "acc + A B on the tensor cores, A in registers, B in shared memory";
  let description = [{
    As `tile.dot`, with A (`M x K`, bf16 or f16) a tile in the warpgroup's
    registers in the `#tile.wgmma` layout: each thread holds the elements of
    A that it held of the f32 accumulator A was computed in, so the
    probabilities of attention (`P = exp(S - m)`, rounded to 16 bits) enter
    the second product `P V` without passing through shared memory. On
    sm_90a, `wgmma.mma_async` with A from registers. `K` is a multiple of 16.
    `async` as for `tile.dot`.

    ```mlir
    %o = tile.dot_reg %p, %v[%s, %c0], %acc {b_mn_major = true}
        : tensor<64x128xbf16, #tile.wgmma>, !tile.ring<stages = 2, rows = 128, cols = 128, bf16>,
          tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
    ```
  }];
  let arguments = (ins Tile_Tile:$a, Tile_RingType:$b, Index:$b_stage, Index:$b_offset,
                       Tile_F32Tile:$acc,
                       DefaultValuedAttr<BoolAttr, "false">:$b_mn_major,
                       UnitAttr:$async);
  let results = (outs Tile_F32Tile:$result);
  let assemblyFormat = [{
    $a `,` $b `[` $b_stage `,` $b_offset `]` `,` $acc attr-dict
    `:` type($a) `,` type($b) `,` type($acc) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Tile_DotWaitOp : Tile_Op<"dot_wait"> {
  let summary = "Waits for the warpgroup's products started with `async`";
  let description = [{
    Waits until at most `pending` of the warpgroup's products (`tile.dot`,
    `tile.dot_reg`) started with `async` are still running, and returns
    `values`, the pending results of products that were started before
    those, complete. Products complete in the order they were started.
    The A operand of a `tile.dot_reg` still running must be among the values
    too (16-bit tiles pass as pairs): its registers are read until the
    product completes, and must not be reused before.

    ```mlir
    %s1 = tile.dot %q[%c0, %c0], %k[%s, %c0], %zero {async} : ...
    ...                                   // the softmax of the previous tile
    %s1r = tile.dot_wait %s1 {pending = 1 : i64}
        : tensor<64x128xf32, #tile.wgmma> -> tensor<64x128xf32, #tile.wgmma>
    ```
  }];
  let arguments = (ins Variadic<Tile_Tile>:$values, I64Attr:$pending);
  let results = (outs Variadic<Tile_Tile>:$results);
  let assemblyFormat = "$values attr-dict `:` type($values) `->` type($results)";
  let hasVerifier = 1;
  let builders = [
    OpBuilder<(ins "::mlir::ValueRange":$values, "int64_t":$pending), [{
      build($_builder, $_state, values.getTypes(), values,
            $_builder.getI64IntegerAttr(pending));
    }]>
  ];
}

//===----------------------------------------------------------------------===//
// Asynchronous copies without a copy engine (sm_80: cp.async)
//===----------------------------------------------------------------------===//

def Tile_AsyncCopyOp : Tile_Op<"async_copy"> {
  let summary = "Starts copying a tile from global memory into a ring stage (cp.async)";
  let description = [{
    Every thread of the block runs it, and together they start the copy of
    the `rows x cols` tile of `source` whose first element is at (`row`,
    `col`) into stage `stage` of `ring`, laid out as the ring says (128-byte
    rows, 16-byte chunk `c` of row `r` of a panel at chunk `c ^ (r % 8)`),
    so that `tile.dot` reads it as it reads a stage TMA wrote. Elements
    outside `source` are written as zero (past M, N or K: the copy's source
    size shrinks, down to nothing), so a ragged edge enters the product as
    zeros.

    Each copy moves `vec` consecutive elements of a row: 8 (16 bytes,
    `cp.async.cg`), 4 or 2 (8 or 4 bytes, `cp.async.ca`), which need the
    source's first element, its rows and `col` aligned to that many bytes.
    Where they are not (checked at run time, once for the whole block), or
    with `vec = 1`, the elements are copied one by one with plain loads and
    stores, complete when the op returns. The copies a thread starts join its current group: they are
    complete once a `tile.async_wait` has seen the group done, and visible to
    the other threads after a `tile.block_barrier` that follows it.

    ```mlir
    tile.async_copy %a[%row, %k], %ring[%s] {vec = 8 : i64}
        : memref<?x4096xbf16>, !tile.ring<stages = 4, rows = 128, cols = 64, bf16>
    ```
  }];
  let arguments = (ins Tile_GlobalMemRef:$source, Index:$row, Index:$col,
                       Tile_RingType:$ring, Index:$stage, I64Attr:$vec);
  let assemblyFormat = [{
    $source `[` $row `,` $col `]` `,` $ring `[` $stage `]` attr-dict `:` type($source) `,` type($ring)
  }];
  let hasVerifier = 1;
}

def Tile_AsyncCommitOp : Tile_Op<"async_commit"> {
  let summary = "Closes the calling thread's group of asynchronous copies";
  let description = [{
    The `tile.async_copy` copies this thread started since its last commit
    form one group (possibly empty: every thread commits at the same points,
    so that counts of groups agree). `cp.async.commit_group`.
  }];
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Tile_AsyncWaitOp : Tile_Op<"async_wait"> {
  let summary = "Waits until at most `pending` of the thread's copy groups are incomplete";
  let description = [{
    Groups complete in the order they were committed, so with `pending = N`
    every group but the last N committed by this thread has landed in shared
    memory. Other threads see the data after a `tile.block_barrier`.
    `cp.async.wait_group N`.

    ```mlir
    tile.async_wait {pending = 2 : i64}
    tile.block_barrier
    ```
  }];
  let arguments = (ins I64Attr:$pending);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Tile_BlockBarrierOp : Tile_Op<"block_barrier"> {
  let summary = "Waits for every thread of the block (bar.sync 0)";
  let description = [{
    Every thread of the block must reach it; shared-memory writes made before
    it by any thread are visible after it to all. Not inside
    `tile.warp_specialize`, whose groups do not all run the same code.
  }];
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Tile_WarpgroupIdOp : Tile_Op<"warpgroup_id", [Pure]> {
  let summary = "The calling thread's warpgroup in the block (thread / 128)";
  let description = [{
    In a kernel of whole warpgroups that are not warp-specialized, each
    warpgroup computes its own part of the block's tile (a `tile.dot` at its
    own offsets), in `#tile.wgmma` tiles.

    ```mlir
    %g = tile.warpgroup_id
    ```
  }];
  let results = (outs Index:$result);
  let assemblyFormat = "attr-dict";
  let hasVerifier = 1;
}

def Tile_WarpSpecializeOp : Tile_Op<"warp_specialize", [
    RecursiveMemoryEffects]> {
  let summary = "A producer and consumer warpgroups, each with its own code";
  let description = [{
    Splits the block into warpgroups of 128 threads: warpgroup 0 is the
    producer, warpgroups 1 to `consumers` the consumers (the kernel has
    `128 * (consumers + 1)` threads). The producer lowers its register limit
    to `producer_regs` and runs the `producer` region on one thread (its
    first); each consumer raises its limit to `consumer_regs` and runs the
    `consumer` region, whose argument is its index in `[0, consumers)`. An
    optional `helper` region runs on one more thread of the producer's
    warpgroup (the first of its second warp): work that waits on memory
    beside the producer's copies and the consumers' products (a turn on a
    flag, a TMA store waited for whole), in step with them through
    mbarriers. Ops there that a consumer runs on its warpgroup's first
    thread (TMA stores and their waits, flags, barrier arrivals) run on the
    helper's one thread, with no warpgroup to meet. The producer's other
    threads do nothing. Regions end with `tile.yield`. Top level of a kernel
    only; nothing after it may wait for the whole block.

    ```mlir
    tile.warp_specialize {consumers = 2, producer_regs = 40, consumer_regs = 232} {
      ...                          // TMA copies into the rings
      tile.yield
    }, {
    ^bb0(%c: index):
      ...                          // tile.dot, epilogue
      tile.yield
    }, helper {                    // optional
      ...                          // waits on flags, TMA stores
      tile.yield
    }
    ```
  }];
  let arguments = (ins I64Attr:$consumers, I64Attr:$producer_regs, I64Attr:$consumer_regs);
  let regions = (region AnyRegion:$producer, AnyRegion:$consumer, AnyRegion:$helper);
  let assemblyFormat = "attr-dict-with-keyword $producer `,` $consumer (`,` `helper` $helper^)?";
  let hasVerifier = 1;
}

def Tile_YieldOp : Tile_Op<"yield", [Pure, Terminator, ParentOneOf<["WarpSpecializeOp"]>]> {
  let summary = "Ends a region of tile.warp_specialize";
  let assemblyFormat = "attr-dict";
}

#endif // TILEJIT_TILE_OPS
