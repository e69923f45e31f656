//===- TileToLLVM.h - the tile dialect to LLVM + NVVM -------------*- C++ -*-===//
//
// The conversion of tile kernels to MLIR's LLVM dialect with NVVM operations:
// a type converter, what differs by target, and one populate function per op
// family (each in the file named after it). The pass that runs them is
// `convert-tile-to-llvm` (Passes.td).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <map>
#include <string>
#include <utility>

#include "core/Target.h"
#include "dialects/Tile/TileDialect.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

namespace tilejit {

/// What the lowering needs to know of the target GPU.
class TargetInfo {
public:
  explicit TargetInfo(const Target &target) : target_(target) {}
  /// Thread-block clusters, distributed shared memory, st.async (sm_90).
  bool hasClusters() const { return target_.hasClusters(); }
  const Target &target() const { return target_; }

private:
  Target target_;
};

/// Tiles become the calling thread's elements as an LLVM vector (in the order
/// of the layout's LayoutAttrInterface); a global memref becomes a struct
/// passed by value: the global pointer, then one i64 per size.
class TileTypeConverter : public mlir::LLVMTypeConverter {
public:
  explicit TileTypeConverter(mlir::MLIRContext *ctx);
};

/// What the patterns of one kernel share: its shared memory and cluster shape
/// (taken from the tile.kernel before it is converted; its operations find it
/// by the name of the function they end up in).
struct KernelLowering {
  int64_t clusterBlocks = 1;
  int64_t blockThreads = 0;
  int64_t scratchBytes = 0; // reduction scratch, from offset 0
  int64_t clusterRows = 0;  // rows of threads a cluster reduction exchanges
  int64_t clusterOffset = 0, barriersOffset = 0, sharedBytes = 0;
  std::string sharedName; // the kernel's llvm.mlir.global in shared memory
  /// Rings and barriers: the kernel's dynamic shared memory (an external
  /// global), and its base aligned to 1024 bytes, computed on entry.
  std::string dynamicName;
  mlir::Value dynamicBase;
  /// The count of cluster reductions done so far (an i32 alloca), set by the
  /// kernel's conversion.
  mlir::Value clusterRound;
};

struct LoweringState {
  llvm::StringMap<KernelLowering> kernels;
  /// The ops of tile.warp_specialize's helper regions, noted before the
  /// regions are moved out (their own lowerings come after): they run on
  /// one thread. (Pointers: the conversion moves ops and frees none before
  /// it ends.)
  llvm::DenseSet<mlir::Operation *> helperOps;

  /// The kernel that `op` (being converted) belongs to.
  KernelLowering &kernelOf(mlir::Operation *op);
};

void populateKernelOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                    mlir::RewritePatternSet &patterns);
void populateLoadStoreOpToLLVMPatterns(TileTypeConverter &converter,
                                       mlir::RewritePatternSet &patterns);
void populateElementwiseOpToLLVMPatterns(TileTypeConverter &converter,
                                         mlir::RewritePatternSet &patterns);
void populateAsyncOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                   mlir::RewritePatternSet &patterns);
namespace llvmx {
struct Emitter;
}

/// Byte offset of element (`row`, `col`) (i64) in a stage of `ring`: its
/// panel, its 128-byte row, its 16-byte chunk swizzled by the row (chunk
/// `c` of row `r` at `c ^ (r % 8)`), its place in the chunk.
mlir::Value ringElementOffset(llvmx::Emitter &e, tile::RingType ring, mlir::Value row,
                              mlir::Value col);
/// The address of stage `stage` (i64) of the ring at `base`.
mlir::Value ringStage(llvmx::Emitter &e, tile::RingType ring, mlir::Value base, mlir::Value stage);
/// Each element of a thread's part of `tile`, by its (row, column) offset
/// from the thread's first element: its index among the thread's elements.
std::map<std::pair<int64_t, int64_t>, int64_t> elementsByOffset(mlir::RankedTensorType tile);

/// tile.dot on wgmma (sm_90a), with tile.dot_reg and tile.dot_wait.
void populateDotOpToLLVMPatterns(TileTypeConverter &converter, mlir::RewritePatternSet &patterns);
/// tile.dot on ldmatrix + mma.sync (every target without wgmma).
void populateMmaSyncDotOpToLLVMPatterns(TileTypeConverter &converter,
                                        mlir::RewritePatternSet &patterns);
/// cp.async copies into rings, their groups, the block barrier, the
/// warpgroup index.
void populateAsyncCopyOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                       mlir::RewritePatternSet &patterns);
void populateReduceOpToLLVMPatterns(TileTypeConverter &converter, LoweringState &state,
                                    mlir::RewritePatternSet &patterns);

} // namespace tilejit
