//===- Registry.cpp - which template builds which op -----------------------===//
#include "compiler/templates/Template.h"

#include "llvm/Support/ErrorHandling.h"

namespace tilejit {

const KernelTemplate &rmsNormForwardTemplate();
const KernelTemplate &rmsNormBackwardTemplate();
const KernelTemplate &gemmTemplate();
const KernelTemplate &attentionForwardTemplate();
const KernelTemplate &attentionBackwardTemplate();

const KernelTemplate *findTemplate(const OpDecl *op) {
  for (const KernelTemplate *t :
       {&rmsNormForwardTemplate(), &rmsNormBackwardTemplate(), &gemmTemplate(),
        &attentionForwardTemplate(), &attentionBackwardTemplate()})
    if (&t->op() == op)
      return t;
  return nullptr;
}

const KernelTemplate &getTemplate(const OpDecl &op) {
  const KernelTemplate *t = findTemplate(&op);
  if (!t) // a declared op without a template: a build error, never a wrong kernel
    llvm::report_fatal_error(llvm::Twine("no template builds op '") + op.name + "'");
  return *t;
}

const KernelTemplate &getTemplate(const KernelSpec &spec) {
  if (!spec.op())
    llvm::report_fatal_error("a kernel spec without an op has no template");
  return getTemplate(*spec.op());
}

} // namespace tilejit
