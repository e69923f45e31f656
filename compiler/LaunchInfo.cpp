//===- LaunchInfo.cpp -----------------------------------------------------===//
#include "compiler/LaunchInfo.h"

#include <algorithm>
#include <sstream>

namespace tilejit {

int64_t GridRule::evaluate(const int64_t *sym, size_t count) const {
  int64_t best = -1;
  for (const auto &prog : results) {
    int64_t stack[16];
    int sp = 0;
    for (const Term &t : prog) {
      if (t.op == Const || t.op == Sym) {
        if (sp == 16) return -1;
        if (t.op == Sym && (t.value < 0 || size_t(t.value) >= count)) return -1;
        stack[sp++] = t.op == Const ? t.value : sym[t.value];
        continue;
      }
      if (sp < 2) return -1;
      int64_t b = stack[--sp], a = stack[--sp], r = 0;
      switch (t.op) {
      case Add: r = a + b; break;
      case Mul: r = a * b; break;
      case FloorDiv:
      case CeilDiv:
      case Mod:
        if (b <= 0) return -1;
        if (t.op == Mod) r = ((a % b) + b) % b;
        else if (t.op == FloorDiv) r = a >= 0 ? a / b : -((-a + b - 1) / b);
        else r = a >= 0 ? (a + b - 1) / b : -((-a) / b);
        break;
      default: return -1;
      }
      stack[sp++] = r;
    }
    if (sp != 1) return -1;
    best = best < 0 ? stack[0] : std::min(best, stack[0]);
  }
  return best;
}

std::string GridRule::str() const {
  std::ostringstream os;
  os << "min(";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i) os << ", ";
    for (size_t j = 0; j < results[i].size(); ++j) {
      const Term &t = results[i][j];
      if (j) os << ' ';
      switch (t.op) {
      case Const: os << t.value; break;
      case Sym: os << 's' << t.value; break;
      case Add: os << '+'; break;
      case Mul: os << '*'; break;
      case FloorDiv: os << "floordiv"; break;
      case CeilDiv: os << "ceildiv"; break;
      case Mod: os << "mod"; break;
      }
    }
  }
  os << ")";
  for (size_t i = 0; i < symbols.size(); ++i)
    os << " s" << i << "=arg" << symbols[i].first
       << (symbols[i].second >= 0 ? ".size" + std::to_string(symbols[i].second) : "");
  return os.str();
}

} // namespace tilejit
