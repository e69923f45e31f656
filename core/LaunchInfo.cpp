//===- LaunchInfo.cpp -----------------------------------------------------===//
#include "core/LaunchInfo.h"

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tilejit {

int64_t GridRule::evaluate(const int64_t *sym, size_t count) const {
  if (results.empty())
    return 1;
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

size_t ParamInfo::bytes() const {
  switch (kind) {
  case View:
    return 8 + 8 * (staticSizes.size() + staticStrides.size());
  case F32:
  case I32:
    return 4;
  case Index:
  case Ptr:
    return 8;
  case TensorMap:
    return 128;
  }
  return 0;
}

size_t ParamInfo::alignment() const {
  switch (kind) {
  case F32:
  case I32:
    return 4;
  case TensorMap:
    return 64;
  default:
    return 8;
  }
}

const char *ParamInfo::kindName(Kind k) {
  switch (k) {
  case View:
    return "view";
  case F32:
    return "f32";
  case Index:
    return "index";
  case I32:
    return "i32";
  case Ptr:
    return "ptr";
  case TensorMap:
    return "tensormap";
  }
  return "?";
}

static llvm::Error entryError(const EntryInfo &e, const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "entry " + e.name + ": " + msg);
}

llvm::Error EntryInfo::validate() const {
  if (blockThreads < 1 || blockThreads > 1024)
    return entryError(*this, "has " + llvm::Twine(blockThreads) + " threads");
  for (int c : cluster)
    if (c < 1 || c > 16)
      return entryError(*this, "has a cluster dimension of " + llvm::Twine(c));
  if (clusterBlocks() > 16)
    return entryError(*this, "has clusters of " + llvm::Twine(clusterBlocks()) + " blocks");
  if (staticSmemBytes < 0 || staticSmemBytes > Target::kStaticSharedBytes)
    return entryError(*this,
                      "has " + llvm::Twine(staticSmemBytes) + " bytes of static shared memory");
  if (dynamicSmemBytes < 0 || dynamicSmemBytes > 256 * 1024)
    return entryError(*this,
                      "has " + llvm::Twine(dynamicSmemBytes) + " bytes of dynamic shared memory");
  for (const ParamInfo &p : params)
    if (p.kind == ParamInfo::View &&
        (p.staticSizes.empty() || p.staticSizes.size() > 4 ||
         std::any_of(p.staticSizes.begin(), p.staticSizes.end(), [](int64_t v) { return v < -1; })))
      return entryError(*this, "has a view parameter with bad sizes");
  for (const ParamInfo &p : params)
    if (!p.staticStrides.empty() &&
        (p.kind != ParamInfo::View || p.staticStrides.size() + 1 != p.staticSizes.size() ||
         std::any_of(p.staticStrides.begin(), p.staticStrides.end(),
                     [](int64_t v) { return v < -1 || v == 0; })))
      return entryError(*this, "has a parameter with bad row strides");
  for (const GridRule &g : grid)
    for (auto [arg, dim] : g.symbols)
      if (arg < 0 || size_t(arg) >= params.size() || dim < -1 ||
          dim >= int(params[size_t(arg)].staticSizes.size()) ||
          (dim < 0 && params[size_t(arg)].kind != ParamInfo::Index &&
           params[size_t(arg)].kind != ParamInfo::I32))
        return entryError(*this, "has a grid symbol naming no parameter size");
  return llvm::Error::success();
}

static nlohmann::json ruleToJson(const GridRule &g) {
  nlohmann::json results = nlohmann::json::array();
  for (const auto &prog : g.results) {
    nlohmann::json terms = nlohmann::json::array();
    for (const GridRule::Term &t : prog)
      terms.push_back({int64_t(t.op), t.value});
    results.push_back(terms);
  }
  nlohmann::json symbols = nlohmann::json::array();
  for (auto [arg, dim] : g.symbols)
    symbols.push_back({arg, dim});
  return {{"rule", results}, {"symbols", symbols}};
}

std::string entriesToJson(const std::vector<EntryInfo> &entries) {
  nlohmann::json out = nlohmann::json::array();
  for (const EntryInfo &e : entries) {
    nlohmann::json params = nlohmann::json::array();
    for (const ParamInfo &p : e.params) {
      params.push_back({{"kind", ParamInfo::kindName(p.kind)},
                        {"elem", std::string(dtypeName(p.elem))},
                        {"sizes", p.staticSizes},
                        {"name", p.name}});
      if (!p.staticStrides.empty())
        params.back()["strides"] = p.staticStrides;
    }
    nlohmann::json grid = nlohmann::json::array();
    for (const GridRule &g : e.grid)
      grid.push_back(ruleToJson(g));
    out.push_back({{"name", e.name},
                   {"threads", e.blockThreads},
                   {"cluster", e.cluster},
                   {"smem", e.staticSmemBytes},
                   {"dynamic_smem", e.dynamicSmemBytes},
                   {"registers", e.registers},
                   {"spill", e.spillBytes},
                   {"params", params},
                   {"grid", grid}});
  }
  return out.dump();
}

namespace {
/// Reads JSON without exceptions: each accessor reports what was wrong.
struct Reader {
  std::string error;
  bool fail(const std::string &what) {
    if (error.empty())
      error = what;
    return false;
  }
  bool integer(const nlohmann::json &o, const char *field, int64_t &out, bool optional = false) {
    if (!o.contains(field))
      return optional || fail(std::string("lacks '") + field + "'");
    const auto &v = o[field];
    if (!v.is_number_integer())
      return fail(std::string("'") + field + "' is not an integer");
    out = v.get<int64_t>();
    return true;
  }
  bool integer32(const nlohmann::json &o, const char *field, int &out, int64_t lo, int64_t hi,
                 bool optional = false) {
    int64_t v = out;
    if (!integer(o, field, v, optional))
      return false;
    if (v < lo || v > hi)
      return fail(std::string("'") + field + "' = " + std::to_string(v) + " is outside [" +
                  std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out = int(v);
    return true;
  }
  bool string(const nlohmann::json &o, const char *field, std::string &out, bool optional = false) {
    if (!o.contains(field))
      return optional || fail(std::string("lacks '") + field + "'");
    if (!o[field].is_string())
      return fail(std::string("'") + field + "' is not a string");
    out = o[field].get<std::string>();
    return true;
  }
  bool rule(const nlohmann::json &j, GridRule &g) {
    if (!j.is_object() || !j.contains("rule") || !j["rule"].is_array() || !j.contains("symbols") ||
        !j["symbols"].is_array())
      return fail("a grid rule is not {rule, symbols}");
    for (const auto &prog : j["rule"]) {
      if (!prog.is_array())
        return fail("a grid rule is malformed");
      std::vector<GridRule::Term> terms;
      for (const auto &t : prog) {
        if (!t.is_array() || t.size() != 2 || !t[0].is_number_integer() ||
            !t[1].is_number_integer() || t[0].get<int64_t>() < GridRule::Const ||
            t[0].get<int64_t>() > GridRule::Mod)
          return fail("a grid term is malformed");
        terms.push_back({GridRule::OpCode(t[0].get<int64_t>()), t[1].get<int64_t>()});
      }
      g.results.push_back(std::move(terms));
    }
    for (const auto &s : j["symbols"]) {
      if (!s.is_array() || s.size() != 2 || !s[0].is_number_integer() ||
          !s[1].is_number_integer() || s[0].get<int64_t>() < 0 || s[0].get<int64_t>() > 4096 ||
          s[1].get<int64_t>() < -1 || s[1].get<int64_t>() > 4)
        return fail("a grid symbol is malformed");
      g.symbols.push_back({int(s[0].get<int64_t>()), int(s[1].get<int64_t>())});
    }
    return true;
  }
};
} // namespace

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
    if (!e.is_object())
      return bad("an entry is not an object");
    Reader r;
    EntryInfo info;
    r.string(e, "name", info.name) && r.integer32(e, "threads", info.blockThreads, 1, 1024) &&
        r.integer32(e, "smem", info.staticSmemBytes, 0, Target::kStaticSharedBytes, true) &&
        r.integer32(e, "dynamic_smem", info.dynamicSmemBytes, 0, 256 * 1024, true) &&
        r.integer32(e, "registers", info.registers, -1, 255, true) &&
        r.integer32(e, "spill", info.spillBytes, 0, 1 << 30, true);
    if (r.error.empty() && e.contains("cluster")) {
      const auto &c = e["cluster"];
      if (!c.is_array() || c.size() != 3 ||
          !std::all_of(c.begin(), c.end(), [](const auto &v) { return v.is_number_integer(); }))
        r.fail("'cluster' is not [x, y, z]");
      else
        for (int d = 0; d < 3; ++d)
          info.cluster[size_t(d)] = int(std::clamp<int64_t>(c[size_t(d)].get<int64_t>(), 0, 64));
    }
    if (r.error.empty() && (!e.contains("params") || !e["params"].is_array()))
      r.fail("lacks 'params'");
    if (r.error.empty())
      for (const auto &p : e["params"]) {
        ParamInfo param;
        std::string kind, elem = "f32";
        if (!p.is_object() || !r.string(p, "kind", kind) || !r.string(p, "elem", elem, true) ||
            !r.string(p, "name", param.name, true))
          break;
        bool known = false;
        for (auto k : {ParamInfo::View, ParamInfo::F32, ParamInfo::Index, ParamInfo::I32,
                       ParamInfo::Ptr, ParamInfo::TensorMap})
          if (kind == ParamInfo::kindName(k)) {
            param.kind = k;
            known = true;
          }
        if (!known) {
          r.fail("a parameter of unknown kind '" + kind + "'");
          break;
        }
        auto dt = parseDType(elem);
        if (!dt) {
          r.fail("a parameter of unknown dtype '" + elem + "'");
          break;
        }
        param.elem = *dt;
        if (p.contains("sizes") && p["sizes"].is_array())
          for (const auto &v : p["sizes"])
            param.staticSizes.push_back(v.is_number_integer() ? v.get<int64_t>() : -2);
        if (p.contains("strides") && p["strides"].is_array())
          for (const auto &v : p["strides"])
            param.staticStrides.push_back(v.is_number_integer() ? v.get<int64_t>() : -2);
        info.params.push_back(std::move(param));
      }
    if (r.error.empty() && (!e.contains("grid") || !e["grid"].is_array() || e["grid"].size() != 3))
      r.fail("lacks 'grid' (three rules)");
    if (r.error.empty())
      for (size_t d = 0; d < 3 && r.rule(e["grid"][d], info.grid[d]); ++d)
        ;
    if (!r.error.empty())
      return bad("entry '" + info.name + "' " + r.error);
    if (auto err = info.validate())
      return bad(llvm::toString(std::move(err)));
    entries.push_back(std::move(info));
  }
  return entries;
}

} // namespace tilejit
