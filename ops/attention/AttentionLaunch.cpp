//===- AttentionLaunch.cpp ------------------------------------------------===//
#include "ops/attention/AttentionLaunch.h"

#include "runtime/TensorMap.h"

#include <cmath>

#include "llvm/ADT/Twine.h"

namespace tilejit::attention {

namespace {
llvm::Error error(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "attn_fwd: " + msg);
}

/// `name` ([b, s, h, d] or [b, h, s, d] at `addr`) as a [d, s, h, b] tensor
/// map whose copies move `box` = (rows, 64, 1, 1) with the 128-byte swizzle.
llvm::Expected<CUtensorMap> mapOf(const char *name, const Call &c, uint64_t addr, int64_t seq,
                                  int64_t heads, const std::vector<int64_t> &box) {
  if (box.size() != 4)
    return error(llvm::Twine("the kernel's tensor map for ") + name + " is not 4-D");
  if (addr % 16 != 0)
    return error(llvm::Twine(name) + " is at an address that is not 16-byte aligned");
  int64_t e = dtypeBytes(c.dt);
  TensorMapDesc t;
  t.dtype = c.dt;
  t.rank = 4;
  t.address = addr;
  t.dims[0] = c.d;
  t.dims[1] = seq;
  t.dims[2] = heads;
  t.dims[3] = c.b;
  if (c.layout == Layout::BSHD) {
    t.strideBytes[0] = heads * c.d * e;
    t.strideBytes[1] = c.d * e;
  } else {
    t.strideBytes[0] = c.d * e;
    t.strideBytes[1] = seq * c.d * e;
  }
  t.strideBytes[2] = seq * heads * c.d * e;
  t.box[0] = uint32_t(box[1]);
  t.box[1] = uint32_t(box[0]);
  t.swizzle = TensorMapDesc::B128;
  auto map = encodeTensorMap(t);
  if (!map)
    return error(llvm::Twine(name) + ": " + llvm::toString(map.takeError()));
  return *map;
}
} // namespace

Call callOf(const Params &p) {
  Call c;
  c.dt = p.dt;
  c.d = p.d;
  c.hq = p.hq;
  c.hkv = p.hkv;
  c.causal = p.causal;
  c.layout = p.layout;
  c.b = p.b;
  c.sq = p.sq;
  c.sk = p.sk;
  return c;
}

llvm::Expected<KernelSpec> specOf(const Call &c, const Target &target) {
  if (c.b < 1 || c.sq < 1 || c.sk < 1 || c.hq < 1 || c.hkv < 1)
    return error("sizes must be positive, got b=" + llvm::Twine(c.b) + " sq=" + llvm::Twine(c.sq) +
                 " sk=" + llvm::Twine(c.sk) + " hq=" + llvm::Twine(c.hq) +
                 " hkv=" + llvm::Twine(c.hkv));
  if (!(c.scale >= 0.0f) || std::isinf(c.scale))
    return error("scale must be positive and finite (0: 1/sqrt(d)), got " +
                 std::to_string(c.scale));
  Params p;
  p.dt = c.dt;
  p.d = c.d;
  p.hq = c.hq;
  p.hkv = c.hkv;
  p.causal = c.causal;
  p.layout = c.layout;
  p.b = c.b;
  p.sq = c.sq;
  p.sk = c.sk;
  p.target = target;
  KernelSpec s = p.spec();
  if (auto err = s.validate())
    return err;
  return s;
}

llvm::Error launch(const LoadedKernel &kernel, const Call &c, CUstream stream) {
  if (kernel.numEntries() != 1)
    return error("the kernel has " + llvm::Twine(kernel.numEntries()) + " entries, not 1");
  const EntryInfo &e = kernel.entry(0);
  if (e.params.size() != 8)
    return error("the kernel takes " + llvm::Twine(e.params.size()) + " parameters, not 8");
  if (!c.q || !c.k || !c.v || !c.o || !c.lse)
    return error("a null device pointer");
  if (c.o % 4 != 0 || c.lse % 4 != 0)
    return error("O and LSE must be 4-byte aligned");
  auto mq = mapOf("Q", c, c.q, c.sq, c.hq, e.params[0].staticSizes);
  if (!mq)
    return mq.takeError();
  auto mk = mapOf("K", c, c.k, c.sk, c.hkv, e.params[1].staticSizes);
  if (!mk)
    return mk.takeError();
  auto mv = mapOf("V", c, c.v, c.sk, c.hkv, e.params[2].staticSizes);
  if (!mv)
    return mv.takeError();
  float scale = c.scale > 0.0f ? c.scale : float(1.0 / std::sqrt(double(c.d)));
  KernelArg args[8];
  args[0] = KernelArg::tensorMap(*mq);
  args[1] = KernelArg::tensorMap(*mk);
  args[2] = KernelArg::tensorMap(*mv);
  if (c.layout == Layout::BSHD)
    args[3] = KernelArg::view(c.o, {c.b, c.sq, c.hq * c.d});
  else
    args[3] = KernelArg::view(c.o, {c.b * c.hq, c.sq, c.d});
  args[4] = KernelArg::view(c.lse, {c.b, c.hq, c.sq});
  args[5] = KernelArg::f32(float(double(scale) * M_LOG2E));
  args[6] = KernelArg::index(c.sq);
  args[7] = KernelArg::index(c.sk);
  return kernel.launch(0, args, 8, stream);
}

} // namespace tilejit::attention
