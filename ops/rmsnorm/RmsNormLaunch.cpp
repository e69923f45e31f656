//===- RmsNormLaunch.cpp ----------------------------------------------------===//
#include "ops/rmsnorm/RmsNormLaunch.h"

#include "ops/rmsnorm/RmsNormDecl.h"

namespace tilejit {

namespace {
llvm::Error opError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

} // namespace

llvm::Error checkRmsNormShape(int64_t rows, int64_t cols) {
  if (rows < 0)
    return opError("rmsnorm: rows must be >= 0, got " + llvm::Twine(rows));
  if (cols < 1)
    return opError("rmsnorm: hidden size must be >= 1, got " + llvm::Twine(cols));
  return llvm::Error::success();
}

/// The spec of either pass: the alignment is what the addresses and the row
/// length actually allow, so a misaligned tensor gets a narrower kernel.
static KernelSpec specOf(bool backward, DType dtype, DType wdtype, int64_t rows, int64_t cols,
                         bool zcg, std::initializer_list<uint64_t> rowOperands,
                         std::initializer_list<uint64_t> weightOperands, const Target &target) {
  rmsnorm::Params p;
  p.backward = backward;
  p.dtype = dtype;
  p.wdtype = wdtype;
  p.rows = std::max<int64_t>(rows, 1);
  p.cols = cols;
  p.zeroCenteredGamma = zcg;
  int64_t rowBytes = cols * dtypeBytes(dtype);
  p.align =
      std::max(1, std::min(alignmentOf(rowOperands, rowBytes), alignmentOf(weightOperands, 16)));
  p.target = target;
  return p.spec();
}

KernelSpec rmsNormSpec(const RmsNormForward &a, const Target &target) {
  return specOf(false, a.dtype, a.wdtype, a.rows, a.cols, a.zeroCenteredGamma, {a.x, a.y}, {a.w},
                target);
}

KernelSpec rmsNormSpec(const RmsNormBackward &a, const Target &target) {
  return specOf(true, a.dtype, a.wdtype, a.rows, a.cols, a.zeroCenteredGamma, {a.x, a.dy, a.dx},
                {a.w, a.dw}, target);
}

llvm::Error launchRmsNormForward(const LoadedKernel &kernel, const RmsNormForward &a,
                                 CUstream stream) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  if (a.rows == 0)
    return llvm::Error::success();
  KernelArg args[] = {KernelArg::view(a.x, {a.rows, a.cols}), KernelArg::view(a.w, {a.cols}),
                      KernelArg::view(a.y, {a.rows, a.cols}), KernelArg::view(a.rstd, {a.rows}),
                      KernelArg::f32(a.eps)};
  return kernel.launch(0, args, std::size(args), stream);
}

llvm::Error launchRmsNormBackward(const LoadedKernel &kernel, const RmsNormBackward &a,
                                  CUstream stream) {
  if (auto err = checkRmsNormShape(a.rows, a.cols))
    return err;
  const LoadedKernel *k = &kernel;
  if (k->numEntries() != 2)
    return opError("rmsnorm backward kernel has " + llvm::Twine(k->numEntries()) +
                   " entries, expected 2");
  if (a.workspace == 0)
    return opError("rmsnorm backward needs a workspace of " + llvm::Twine(k->workspaceBytes()) +
                   " bytes");
  if (a.workspace % 16 != 0)
    return opError("rmsnorm backward workspace must be 16-byte aligned");
  int64_t partialRows = k->workspaceBytes() / (4 * a.cols);
  // With zero rows the first kernel still runs: its programs write zero
  // partials, so dw comes out zero.
  KernelArg main[] = {
      KernelArg::view(a.dy, {a.rows, a.cols}), KernelArg::view(a.x, {a.rows, a.cols}),
      KernelArg::view(a.rstd, {a.rows}),       KernelArg::view(a.w, {a.cols}),
      KernelArg::view(a.dx, {a.rows, a.cols}), KernelArg::view(a.workspace, {partialRows, a.cols})};
  if (a.rows == 0) {
    // Views of zero rows still need a valid address for the checks.
    for (int i : {0, 1, 2, 4})
      if (main[i].ptr == 0)
        main[i].ptr = a.workspace;
  }
  if (auto err = k->launch(0, main, std::size(main), stream))
    return err;
  KernelArg reduce[] = {KernelArg::view(a.workspace, {partialRows, a.cols}),
                        KernelArg::view(a.dw, {a.cols})};
  return k->launch(1, reduce, std::size(reduce), stream);
}

} // namespace tilejit
