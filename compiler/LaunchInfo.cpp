//===- LaunchInfo.cpp -----------------------------------------------------===//
#include "compiler/LaunchInfo.h"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tilejit {

int64_t GridRule::evaluate(const int64_t *sym, size_t count) const {
  int64_t best = -1;
  for (const auto &prog : results) {
    int64_t stack[16];
    int sp = 0;
    for (const Term &t : prog) {
      if (t.op == Const || t.op == Sym) {
        if (sp == 16)
          return -1;
        if (t.op == Sym && (t.value < 0 || size_t(t.value) >= count))
          return -1;
        stack[sp++] = t.op == Const ? t.value : sym[t.value];
        continue;
      }
      if (sp < 2)
        return -1;
      int64_t b = stack[--sp], a = stack[--sp], r = 0;
      switch (t.op) {
      case Add:
        r = a + b;
        break;
      case Mul:
        r = a * b;
        break;
      case FloorDiv:
      case CeilDiv:
      case Mod:
        if (b <= 0)
          return -1;
        if (t.op == Mod)
          r = ((a % b) + b) % b;
        else if (t.op == FloorDiv)
          r = a >= 0 ? a / b : -((-a + b - 1) / b);
        else
          r = a >= 0 ? (a + b - 1) / b : -((-a) / b);
        break;
      default:
        return -1;
      }
      stack[sp++] = r;
    }
    if (sp != 1)
      return -1;
    best = best < 0 ? stack[0] : std::min(best, stack[0]);
  }
  return best;
}

std::string GridRule::str() const {
  std::ostringstream os;
  os << "min(";
  for (size_t i = 0; i < results.size(); ++i) {
    if (i)
      os << ", ";
    for (size_t j = 0; j < results[i].size(); ++j) {
      const Term &t = results[i][j];
      if (j)
        os << ' ';
      switch (t.op) {
      case Const:
        os << t.value;
        break;
      case Sym:
        os << 's' << t.value;
        break;
      case Add:
        os << '+';
        break;
      case Mul:
        os << '*';
        break;
      case FloorDiv:
        os << "floordiv";
        break;
      case CeilDiv:
        os << "ceildiv";
        break;
      case Mod:
        os << "mod";
        break;
      }
    }
  }
  os << ")";
  for (size_t i = 0; i < symbols.size(); ++i)
    os << " s" << i << "=arg" << symbols[i].first
       << (symbols[i].second >= 0 ? ".size" + std::to_string(symbols[i].second) : "");
  return os.str();
}

std::string entriesToJson(const std::vector<EntryInfo> &entries) {
  nlohmann::json out = nlohmann::json::array();
  for (const EntryInfo &e : entries) {
    nlohmann::json params = nlohmann::json::array();
    for (const ParamInfo &p : e.params)
      params.push_back({{"kind", int(p.kind)},
                        {"elem", std::string(dtypeName(p.elem))},
                        {"sizes", p.staticSizes},
                        {"name", p.name}});
    nlohmann::json results = nlohmann::json::array();
    for (const auto &prog : e.grid.results) {
      nlohmann::json terms = nlohmann::json::array();
      for (const GridRule::Term &t : prog)
        terms.push_back({int64_t(t.op), t.value});
      results.push_back(terms);
    }
    nlohmann::json symbols = nlohmann::json::array();
    for (auto [arg, dim] : e.grid.symbols)
      symbols.push_back({arg, dim});
    out.push_back({{"name", e.name},
                   {"threads", e.blockThreads},
                   {"cluster", e.clusterBlocks},
                   {"smem", e.staticSmemBytes},
                   {"registers", e.registers},
                   {"spill", e.spillBytes},
                   {"params", params},
                   {"grid", results},
                   {"grid_symbols", symbols}});
  }
  return out.dump();
}

llvm::Expected<std::vector<EntryInfo>> entriesFromJson(const std::string &text) {
  auto bad = [](const std::string &what) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "stored launch information is malformed: " + what);
  };
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_array())
    return bad("not a JSON array");
  std::vector<EntryInfo> entries;
  for (const auto &e : j) {
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("threads") ||
        !e["threads"].is_number_integer() || !e.contains("params") || !e["params"].is_array() ||
        !e.contains("grid") || !e["grid"].is_array() || !e.contains("grid_symbols") ||
        !e["grid_symbols"].is_array())
      return bad("an entry lacks name, threads, params or grid");
    EntryInfo info;
    info.name = e["name"].get<std::string>();
    info.blockThreads = e["threads"].get<int>();
    if (info.blockThreads < 1 || info.blockThreads > 1024)
      return bad("entry " + info.name + " has " + std::to_string(info.blockThreads) + " threads");
    info.clusterBlocks = e.value("cluster", 1);
    if (info.clusterBlocks < 1 || info.clusterBlocks > kMaxClusterBlocks)
      return bad("entry " + info.name + " has clusters of " + std::to_string(info.clusterBlocks) +
                 " blocks");
    info.staticSmemBytes = e.value("smem", 0);
    info.registers = e.value("registers", -1);
    info.spillBytes = e.value("spill", 0);
    for (const auto &p : e["params"]) {
      if (!p.is_object() || !p.contains("kind") || !p["kind"].is_number_integer())
        return bad("entry " + info.name + " has a parameter without a kind");
      ParamInfo param;
      int kind = p["kind"].get<int>();
      if (kind < ParamInfo::View || kind > ParamInfo::Index)
        return bad("entry " + info.name + " has a parameter of unknown kind");
      param.kind = ParamInfo::Kind(kind);
      auto elem = parseDType(p.value("elem", std::string("f32")));
      if (!elem)
        return bad("entry " + info.name + " has a parameter of unknown dtype");
      param.elem = *elem;
      if (p.contains("sizes") && p["sizes"].is_array())
        for (const auto &v : p["sizes"])
          param.staticSizes.push_back(v.is_number_integer() ? v.get<int64_t>() : -2);
      if (param.kind == ParamInfo::View &&
          (param.staticSizes.empty() || param.staticSizes.size() > 4 ||
           std::any_of(param.staticSizes.begin(), param.staticSizes.end(),
                       [](int64_t v) { return v < -1; })))
        return bad("entry " + info.name + " has a view parameter with bad sizes");
      param.name = p.value("name", std::string());
      info.params.push_back(std::move(param));
    }
    for (const auto &prog : e["grid"]) {
      if (!prog.is_array())
        return bad("entry " + info.name + " has a malformed grid");
      std::vector<GridRule::Term> terms;
      for (const auto &t : prog) {
        if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() ||
            !t[1].is_number_integer() || t[0].get<int64_t>() < GridRule::Const ||
            t[0].get<int64_t>() > GridRule::Mod)
          return bad("entry " + info.name + " has a malformed grid term");
        terms.push_back({GridRule::OpCode(t[0].get<int64_t>()), t[1].get<int64_t>()});
      }
      info.grid.results.push_back(std::move(terms));
    }
    for (const auto &s : e["grid_symbols"]) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() || !s[1].is_number_integer())
        return bad("entry " + info.name + " has a malformed grid symbol");
      int arg = s[0].get<int>(), dim = s[1].get<int>();
      if (arg < 0 || size_t(arg) >= info.params.size() || dim < -1 || dim > 3)
        return bad("entry " + info.name + " has a grid symbol naming no parameter");
      info.grid.symbols.push_back({arg, dim});
    }
    entries.push_back(std::move(info));
  }
  return entries;
}

} // namespace tilejit
