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

} // namespace tilejit
