//===- Nvrtc.h - CUDA C++ to PTX and cubin through NVRTC ---------*- C++ -*-===//
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "llvm/Support/Error.h"

namespace tilejit {

struct NvrtcOutput {
  std::string ptx;
  std::vector<char> cubin;
  std::string log;
};

/// Compiles `source` (which may include the embedded device headers) for
/// `arch`. `name` labels the program in errors, which carry NVRTC's whole log.
llvm::Expected<NvrtcOutput> compileWithNvrtc(std::string_view source, std::string_view name,
                                             std::string_view arch);

/// "13.0", from nvrtcVersion().
std::string nvrtcVersionString();

} // namespace tilejit
