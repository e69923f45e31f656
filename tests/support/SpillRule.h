//===- SpillRule.h - the spills a test accepts of a built kernel --*- C++ -*-===//
#pragma once

#include <string>

#include "core/LaunchInfo.h"
#include "ops/attention/AttentionDecl.h"

namespace tilejit::testing {

/// Bytes of local memory `entry` of a kernel built for `spec` may spill:
/// none, but for attn_bwd's dK/dV kernel with grouped heads, which keeps a
/// second epilogue (each part's f32 sums) beside the plain one; at d = 128
/// without a mask ptxas spills 8 bytes there (the kernel built without that
/// epilogue spills none), outside the loop. And the fused backward's kernel
/// (config `fused`, not a default: dQ's part beside dK and dV), which
/// spills 8 to 48 bytes at d = 128 and 8 bytes at d = 64 with three stages
/// under a mask (bench/NOTES.md b4, b5).
inline int64_t allowedSpillBytes(const KernelSpec &spec, const EntryInfo &entry) {
  if (attention::isBackward(spec) && entry.name.find("attn_bwd_fused_") != std::string::npos)
    return spec[attention::HeadDim] == 128 ? 128 : 8;
  bool that = attention::isBackward(spec) && spec[attention::QHeads] != spec[attention::KvHeads] &&
              spec[attention::HeadDim] == 128 && spec[attention::Causal] == 0;
  bool dkdv = entry.name.find("dkdv_") != std::string::npos &&
              entry.name.find("dkdv_sum_") == std::string::npos;
  return that && dkdv ? 8 : 0;
}

} // namespace tilejit::testing
