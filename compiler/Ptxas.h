//===- Ptxas.h - PTX to cubin through nvJitLink ------------------*- C++ -*-===//
#pragma once

#include <string>
#include <string_view>

#include "compiler/Nvrtc.h"
#include "llvm/Support/Error.h"

namespace tilejit {

/// Assembles `ptx` into a cubin for `arch` with ptxas at full optimization,
/// in this process (nvJitLink). PTX that sets per-warpgroup register limits
/// (setmaxnreg) goes to the ptxas program of the same release where one is
/// found ($TILEJIT_PTXAS, $CUDA_HOME/bin, /usr/local/cuda/bin, PATH):
/// nvJitLink compiles PTX as one unit of a link and ignores those limits.
/// `name` labels the program in errors, which carry the whole log. The
/// result's log holds ptxas's resource report in the format NVRTC's has; its
/// `ptx` is left empty (the caller has it).
llvm::Expected<NvrtcOutput> assembleWithPtxas(std::string_view ptx, std::string_view name,
                                              std::string_view arch);

/// "13.0" (nvJitLink's release), with " (nvJitLink only)" where no ptxas
/// program of that release is found (kernels that set register limits then
/// lose them): part of every key.
std::string ptxasVersionString();

} // namespace tilejit
