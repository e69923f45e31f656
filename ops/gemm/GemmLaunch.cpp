//===- GemmLaunch.cpp -----------------------------------------------------===//
#include "ops/gemm/GemmLaunch.h"

#include "runtime/CudaDriver.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/TensorMap.h"

#include <algorithm>
#include <cstdint>

#include "llvm/ADT/Twine.h"

namespace tilejit::gemm {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "gemm: " + msg);
}

/// A row-major `rows x cols` operand at `addr` with rows `ld` apart, as a
/// tensor map whose copies move `box` (rows, cols) with the 128-byte swizzle.
llvm::Expected<CUtensorMap> mapOf(const char *name, DType t, uint64_t addr, int64_t rows,
                                  int64_t cols, int64_t ld, const std::vector<int64_t> &box) {
  int bytes = dtypeBytes(t);
  if (addr % 16 != 0)
    return error(llvm::Twine(name) + " is at an address that is not 16-byte aligned");
  if ((ld * bytes) % 16 != 0)
    return error(llvm::Twine(name) + "'s rows are " + llvm::Twine(ld * bytes) +
                 " bytes apart; the copy engine needs a multiple of 16 (a leading dimension "
                 "that is a multiple of " +
                 llvm::Twine(16 / bytes) + ")");
  if (box.size() != 2)
    return error("the kernel's tensor map parameter has no box");
  TensorMapDesc d;
  d.dtype = t;
  d.rank = 2;
  d.address = addr;
  d.dims[0] = cols;
  d.dims[1] = rows;
  d.strideBytes[0] = ld * bytes;
  d.box[0] = uint32_t(box[1]);
  d.box[1] = uint32_t(box[0]);
  d.swizzle = TensorMapDesc::B128;
  // (encodeTensorMap keeps the maps a training step asks for again.)
  auto map = encodeTensorMap(d);
  if (!map)
    return error(llvm::Twine(name) + ": " + llvm::toString(map.takeError()));
  return *map;
}
} // namespace

Call callOf(const Params &p) {
  Call c;
  c.ab = p.ab;
  c.out = p.out;
  c.transA = p.transA;
  c.transB = p.transB;
  c.hasC = p.hasC;
  c.hasBias = p.hasBias;
  c.m = p.m;
  c.n = p.n;
  c.k = p.k;
  c.beta = p.hasC ? 1.0f : 0.0f;
  return c;
}

llvm::Expected<KernelSpec> specOf(const Call &c, const Target &target) {
  if (c.m < 1 || c.n < 1 || c.k < 1)
    return error("sizes must be positive, got m=" + llvm::Twine(c.m) + " n=" + llvm::Twine(c.n) +
                 " k=" + llvm::Twine(c.k));
  if (c.ab == DType::F32)
    return error("A and B must be bf16 or f16");
  // Each leading dimension: 0 (the row length) or at least a row. Those of
  // C and D (on a target without wgmma, of A and B too) share the spec's
  // `ld`: one that is not the row length makes the kernel take all of them
  // with row strides, which must be multiples of 16 bytes.
  struct Ld {
    const char *name, *what;
    int64_t ld, row;
    DType type;
    bool shares;
  };
  bool views = !target.hasWgmma();
  const Ld lds[] = {{"lda", "A", c.lda, c.transA ? c.m : c.k, c.ab, views},
                    {"ldb", "B", c.ldb, c.transB ? c.k : c.n, c.ab, views},
                    {"ldc", "C", c.ldc, c.n, c.out, c.hasC},
                    {"ldd", "D", c.ldd, c.n, c.out, true}};
  bool ld = false;
  for (const Ld &l : lds) {
    if (l.ld < 0 || (l.ld > 0 && l.ld < l.row))
      return error(llvm::Twine(l.name) + " = " + llvm::Twine(l.ld) + " is " +
                   (l.ld < 0 ? "negative" : "shorter than a row of " + llvm::Twine(l.what)) + " (" +
                   llvm::Twine(l.row) + " elements; 0: packed rows)");
    int bytes = dtypeBytes(l.type);
    if (l.shares && l.ld != 0 && l.ld != l.row) {
      if ((l.ld * bytes) % 16 != 0)
        return error(llvm::Twine(l.name) + " = " + llvm::Twine(l.ld) + ": rows of " +
                     llvm::Twine(l.what) + " that are not packed must lie a multiple of 16 " +
                     "bytes apart (a multiple of " + llvm::Twine(16 / bytes) + " elements)");
      ld = true;
    }
  }
  if (ld)
    for (const Ld &l : lds)
      if (l.shares && (l.ld == 0 || l.ld == l.row) && (l.row * dtypeBytes(l.type)) % 16 != 0)
        return error(llvm::Twine(l.what) + "'s rows are packed (" + llvm::Twine(l.row) +
                     " elements) beside another operand's leading dimension: then its rows " +
                     "too must lie a multiple of 16 bytes apart (give " + llvm::Twine(l.name) +
                     " a multiple of " + llvm::Twine(16 / dtypeBytes(l.type)) + ")");
  Params p;
  p.ab = c.ab;
  p.out = c.out;
  p.transA = c.transA;
  p.transB = c.transB;
  p.hasC = c.hasC;
  p.hasBias = c.hasBias;
  p.m = c.m;
  p.n = c.n;
  p.k = c.k;
  p.target = target;
  p.ld = ld;
  // C in place of D is read and written with one stride.
  if (c.hasC && c.c == c.d && c.d != 0 && (c.ldc ? c.ldc : c.n) != (c.ldd ? c.ldd : c.n))
    return error("C is D but ldc = " + llvm::Twine(c.ldc) + " and ldd = " + llvm::Twine(c.ldd) +
                 " differ");
  p.dAligned = c.d % 16 == 0;
  KernelSpec s = p.spec();
  if (auto err = s.validate())
    return err;
  return s;
}

namespace {
constexpr size_t kMaxArgs = 11;

/// The parameters a call of `c` passes: A, B, D, [D's tensor map,] [C,]
/// [bias,] alpha, [beta,] [workspace, flags,] and the programs cap on the
/// sm_90a kernel.
size_t paramCount(const Call &c, bool persistent, bool tmaStore, bool split) {
  return 4 + (tmaStore ? 1 : 0) + (c.hasC ? 2 : 0) + (c.hasBias ? 1 : 0) + (split ? 2 : 0) +
         (persistent ? 1 : 0);
}

/// What the sm_90a kernel's parameters say of its shape (GemmTemplate.cpp
/// writes them): D through TMA stores (D's tensor map after D), K split (two
/// rank-3 f32 views before the programs cap: the partial sums, ? x bm x bn,
/// and the flags, ? x (splitk - 1) x consumers; no other parameter is a
/// rank-3 view).
struct KernelShape {
  bool tmaStore = false, split = false;
  int64_t bm = 0, bn = 0, consumers = 0, others = 0; // others: splitk - 1
};

KernelShape shapeOf(const EntryInfo &e) {
  KernelShape k;
  size_t n = e.params.size();
  k.tmaStore = n > 3 && e.params[3].kind == ParamInfo::TensorMap;
  auto f32View3 = [&](const ParamInfo &q) {
    return q.kind == ParamInfo::View && q.elem == DType::F32 && q.staticSizes.size() == 3;
  };
  if (n >= 3 && f32View3(e.params[n - 3]) && f32View3(e.params[n - 2])) {
    k.split = true;
    k.bm = e.params[n - 3].staticSizes[1];
    k.bn = e.params[n - 3].staticSizes[2];
    k.others = e.params[n - 2].staticSizes[1];
    k.consumers = e.params[n - 2].staticSizes[2];
  }
  return k;
}

/// The workspace's parts: the partial sums of every part of a tile but the
/// last, then their flags (a word per such part and consumer, zeroed before
/// each launch).
struct SplitLayout {
  int64_t tiles = 0, partialBytes = 0, flagBytes = 0;
  int64_t bytes() const { return partialBytes + flagBytes; }
};

SplitLayout splitLayout(const KernelShape &k, const Call &c) {
  SplitLayout l;
  if (!k.split)
    return l;
  l.tiles = ((c.m + k.bm - 1) / k.bm) * ((c.n + k.bn - 1) / k.bn);
  l.partialBytes = l.tiles * k.others * k.bm * k.bn * 4;
  l.flagBytes = (l.tiles * k.others * k.consumers * 4 + 15) / 16 * 16;
  return l;
}

/// A rows x cols view at `addr` whose rows are `ld` apart (0: cols), for
/// parameter `p`: with strides where the kernel takes them, else dense (a
/// leading dimension it cannot take is an error naming `name`).
llvm::Expected<KernelArg> rowsArg(const ParamInfo &p, const char *name, uint64_t addr, int64_t rows,
                                  int64_t cols, int64_t ld) {
  if (!p.staticStrides.empty())
    return KernelArg::strided(addr, {rows, cols}, {ld ? ld : cols});
  if (ld != 0 && ld != cols)
    return error(llvm::Twine(name) + " = " + llvm::Twine(ld) + ": the kernel reads rows of " +
                 llvm::Twine(cols) + " elements (a spec with ld = 1 takes a leading dimension)");
  return KernelArg::view(addr, {rows, cols});
}

/// D and the epilogue's arguments, in GemmTemplate.cpp's order (D's tensor
/// map, with tmastore, comes after D: the caller adds it).
llvm::Error addEpilogueArgs(const EntryInfo &e, const Call &c, KernelArg *args, size_t &n,
                            const CUtensorMap *dMap) {
  const ParamInfo &dParam = e.params[2];
  auto d = rowsArg(dParam, "ldd", c.d, c.m, c.n, c.ldd);
  if (!d)
    return d.takeError();
  args[n++] = *d;
  if (dMap)
    args[n++] = KernelArg::tensorMap(*dMap);
  if (c.hasC) {
    auto cArg = rowsArg(dParam, "ldc", c.c, c.m, c.n, c.ldc);
    if (!cArg)
      return cArg.takeError();
    args[n++] = *cArg;
  }
  if (c.hasBias)
    args[n++] = KernelArg::view(c.bias, {c.n});
  args[n++] = KernelArg::f32(c.alpha);
  if (c.hasC)
    args[n++] = KernelArg::f32(c.beta);
  return llvm::Error::success();
}

/// The sm_80 kernel (GemmSm80Template.cpp; every target without wgmma): A and
/// B as plain views, one program per tile. Its copies need no alignment (a
/// misaligned operand is copied element by element); its views have dense
/// rows unless the spec says ld.
llvm::Error launchViews(const LoadedKernel &kernel, const Call &c, CUstream stream) {
  const EntryInfo &e = kernel.entry(0);
  int64_t abBytes = dtypeBytes(c.ab);
  if (c.a % abBytes != 0 || c.b % abBytes != 0)
    return error("A and B must be aligned to their " + llvm::Twine(abBytes) + "-byte elements");
  auto a = c.transA ? rowsArg(e.params[0], "lda", c.a, c.k, c.m, c.lda)
                    : rowsArg(e.params[0], "lda", c.a, c.m, c.k, c.lda);
  if (!a)
    return a.takeError();
  auto b = c.transB ? rowsArg(e.params[1], "ldb", c.b, c.n, c.k, c.ldb)
                    : rowsArg(e.params[1], "ldb", c.b, c.k, c.n, c.ldb);
  if (!b)
    return b.takeError();
  KernelArg args[kMaxArgs];
  size_t n = 0;
  args[n++] = *a;
  args[n++] = *b;
  if (auto err = addEpilogueArgs(e, c, args, n, nullptr))
    return err;
  return kernel.launch(0, args, n, stream);
}
} // namespace

llvm::Error launch(const LoadedKernel &kernel, const Call &c, int smCount, CUstream stream) {
  if (kernel.numEntries() != 1)
    return error("the kernel has " + llvm::Twine(kernel.numEntries()) + " entries, not 1");
  const EntryInfo &e = kernel.entry(0);
  if (c.d == 0 || c.a == 0 || c.b == 0 || (c.hasC && c.c == 0) || (c.hasBias && c.bias == 0))
    return error("a null device pointer");
  bool persistent = e.params.empty() || e.params[0].kind != ParamInfo::View;
  KernelShape shape = persistent ? shapeOf(e) : KernelShape{};
  bool tmaStore = shape.tmaStore;
  size_t expected = paramCount(c, persistent, tmaStore, shape.split);
  if (e.params.size() != expected)
    return error("the kernel takes " + llvm::Twine(e.params.size()) + " parameters; a call " +
                 (c.hasC ? "with" : "without") + " C and " + (c.hasBias ? "with" : "without") +
                 " a bias passes " + llvm::Twine(expected));
  int64_t outBytes = dtypeBytes(c.out);
  // D, C and the bias are written and read in runs of two elements.
  if (c.d % (2 * outBytes) != 0 || (c.hasC && c.c % (2 * outBytes) != 0))
    return error("C and D must be aligned to two elements");
  if (c.hasBias && c.bias % (2 * dtypeBytes(c.ab)) != 0)
    return error("the bias must be aligned to two elements (" + llvm::Twine(2 * dtypeBytes(c.ab)) +
                 " bytes)");
  if (!persistent)
    return launchViews(kernel, c, stream);
  int64_t lda = c.lda ? c.lda : (c.transA ? c.m : c.k);
  int64_t ldb = c.ldb ? c.ldb : (c.transB ? c.k : c.n);
  auto mapA = c.transA ? mapOf("A", c.ab, c.a, c.k, c.m, lda, e.params[0].staticSizes)
                       : mapOf("A", c.ab, c.a, c.m, c.k, lda, e.params[0].staticSizes);
  if (!mapA)
    return mapA.takeError();
  auto mapB = c.transB ? mapOf("B", c.ab, c.b, c.n, c.k, ldb, e.params[1].staticSizes)
                       : mapOf("B", c.ab, c.b, c.k, c.n, ldb, e.params[1].staticSizes);
  if (!mapB)
    return mapB.takeError();
  llvm::Expected<CUtensorMap> mapD = CUtensorMap{};
  if (tmaStore)
    mapD = mapOf("D", c.out, c.d, c.m, c.n, c.ldd ? c.ldd : c.n, e.params[3].staticSizes);
  if (!mapD)
    return mapD.takeError();
  int64_t programs = c.maxPrograms > 0 ? c.maxPrograms : smCount;
  if (shape.split && smCount > 0)
    programs = std::min<int64_t>(programs, smCount);
  // A program of a kernel in clusters is a cluster: the cap counts blocks.
  programs = std::max<int64_t>(1, programs / e.clusterBlocks());
  KernelArg args[kMaxArgs];
  size_t n = 0;
  args[n++] = KernelArg::tensorMap(*mapA);
  args[n++] = KernelArg::tensorMap(*mapB);
  if (auto err = addEpilogueArgs(e, c, args, n, tmaStore ? &*mapD : nullptr))
    return err;
  if (!shape.split) {
    args[n++] = KernelArg::index(programs);
    return kernel.launch(0, args, n, stream);
  }
  // K split: the last part of a tile waits for the others, so every
  // program must be resident at once: at most one per multiprocessor (the
  // kernel's shared memory fits one). The partial sums' workspace (the
  // caller's, or the pool's for this launch) with its flags zeroed first.
  SplitLayout l = splitLayout(shape, c);
  auto drv = CudaDriver::get();
  if (!drv)
    return drv.takeError();
  CUdeviceptr ws = c.workspace;
  bool pooled = ws == 0;
  if (!pooled && ws % 16 != 0)
    return error("the workspace must be 16-byte aligned");
  if (!pooled && c.workspaceSize < l.bytes())
    return error("the workspace holds " + llvm::Twine(c.workspaceSize) +
                 " bytes; a split of K into " + llvm::Twine(shape.others + 1) + " parts needs " +
                 llvm::Twine(l.bytes()) + " (gemm::workspaceBytes)");
  StreamBuffer scratch;
  if (pooled) {
    auto taken = StreamBuffer::take(kernel.context(), size_t(l.bytes()), stream,
                                    "gemm: the split-K workspace");
    if (!taken)
      return taken.takeError();
    scratch = std::move(*taken);
    ws = scratch.ptr();
  }
  uint64_t flags = uint64_t(ws) + uint64_t(l.partialBytes);
  CUresult r = drv->cuMemsetD8Async(CUdeviceptr(flags), 0, size_t(l.flagBytes), stream);
  if (r != CUDA_SUCCESS)
    return scratch.giveBack(drv->error(r, "gemm: zeroing the split-K flags (cuMemsetD8Async)"));
  args[n++] = KernelArg::view(uint64_t(ws), {l.tiles * shape.others, shape.bm, shape.bn});
  args[n++] = KernelArg::view(flags, {l.tiles, shape.others, shape.consumers});
  args[n++] = KernelArg::index(programs);
  return scratch.giveBack(kernel.launch(0, args, n, stream));
}

int64_t workspaceBytes(const LoadedKernel &kernel, const Call &call) {
  if (kernel.numEntries() != 1)
    return 0;
  const EntryInfo &e = kernel.entry(0);
  if (e.params.empty() || e.params[0].kind == ParamInfo::View)
    return 0;
  return splitLayout(shapeOf(e), call).bytes();
}

} // namespace tilejit::gemm
