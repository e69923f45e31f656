//===- Registry.cpp - which template builds which op -----------------------===//
#include "compiler/templates/Template.h"

namespace tilejit {

const KernelTemplate &rmsNormTemplate(OpKind op);

const KernelTemplate &getTemplate(OpKind op) {
  switch (op) {
  case OpKind::RmsNormFwd:
  case OpKind::RmsNormBwd:
    return rmsNormTemplate(op);
  }
  return rmsNormTemplate(OpKind::RmsNormFwd);
}

int assumedSMCount(std::string_view arch) {
  if (arch == "sm_90" || arch == "sm_90a")
    return 132;
  if (arch == "sm_80")
    return 108;
  return 84;
}

} // namespace tilejit
