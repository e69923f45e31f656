//===- KernelSpec.cpp -----------------------------------------------------===//
#include "core/KernelSpec.h"

#include <algorithm>

#include "llvm/ADT/Twine.h"

namespace tilejit {

std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::F32:
    return "f32";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view n) {
  if (n == "bf16" || n == "bfloat16")
    return DType::BF16;
  if (n == "f16" || n == "fp16" || n == "float16" || n == "half")
    return DType::F16;
  if (n == "f32" || n == "fp32" || n == "float32" || n == "float")
    return DType::F32;
  return std::nullopt;
}

int dtypeBytes(DType t) { return t == DType::F32 ? 4 : 2; }

static llvm::Error specError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

int OpDecl::index(std::string_view n) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == n)
      return int(i);
  return -1;
}

const OpDecl *findOp(std::string_view name) {
  for (const OpDecl *op : allOps())
    if (op->name == name)
      return op;
  return nullptr;
}

std::string knownOpNames() {
  std::string s;
  for (const OpDecl *op : allOps())
    s += (s.empty() ? "" : ", ") + std::string(op->name);
  return s;
}

static std::string paramNames(const OpDecl &op) {
  std::string s;
  for (const ParamDecl &p : op.params)
    s += (s.empty() ? "" : ", ") + std::string(p.name);
  return s;
}

KernelSpec::KernelSpec(const OpDecl &op, Target t) : target(t), op_(&op) {
  for (size_t i = 0; i < op.params.size() && i < size_t(kMaxParams); ++i)
    values_[i] = op.params[i].defaultValue;
}

llvm::Expected<int64_t> KernelSpec::get(std::string_view name) const {
  int i = op_ ? op_->index(name) : -1;
  if (i < 0)
    return specError(llvm::Twine(opName()) + " has no parameter '" + llvm::Twine(name) + "'" +
                     (op_ ? " (its parameters: " + paramNames(*op_) + ")" : std::string()));
  return values_[size_t(i)];
}

llvm::Error KernelSpec::set(std::string_view name, int64_t v) {
  int i = op_ ? op_->index(name) : -1;
  if (i < 0)
    return specError(llvm::Twine(opName()) + " has no parameter '" + llvm::Twine(name) + "'" +
                     (op_ ? " (its parameters: " + paramNames(*op_) + ")" : std::string()));
  values_[size_t(i)] = v;
  return llvm::Error::success();
}

static void appendValue(std::string &s, const ParamDecl &p, int64_t v) {
  if (p.kind == ParamDecl::Type)
    s += dtypeName(DType(v));
  else
    s += std::to_string(v);
}

std::string KernelSpec::canonical(bool withRuntimeSizes) const {
  std::string s(opName());
  if (op_)
    for (size_t i = 0; i < op_->params.size(); ++i) {
      const ParamDecl &p = op_->params[i];
      if (p.launchTime && !withRuntimeSizes)
        continue;
      s += ' ';
      s += p.name;
      s += '=';
      appendValue(s, p, values_[i]);
    }
  s += " arch=";
  s += target.archName();
  if (target.sms != 0)
    s += " sms=" + std::to_string(target.sms);
  return s;
}

static llvm::Expected<int64_t> parseInt(std::string_view field, std::string_view v) {
  if (v.empty())
    return specError("'" + llvm::Twine(field) + "' has no value");
  // Accumulated as a magnitude, so that every int64 value reads back,
  // INT64_MIN and INT64_MAX included.
  uint64_t r = 0;
  size_t i = 0;
  bool neg = v[0] == '-';
  if (neg)
    i = 1;
  if (i == v.size())
    return specError("'" + llvm::Twine(field) + "=" + llvm::Twine(v) + "' is not an integer");
  const uint64_t limit = neg ? uint64_t(INT64_MAX) + 1 : uint64_t(INT64_MAX);
  for (; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9')
      return specError("'" + llvm::Twine(field) + "=" + llvm::Twine(v) + "' is not an integer");
    unsigned d = unsigned(v[i] - '0');
    if (r > (limit - d) / 10)
      return specError("'" + llvm::Twine(field) + "=" + llvm::Twine(v) +
                       "' is out of the range of a 64-bit integer");
    r = r * 10 + d;
  }
  if (!neg)
    return int64_t(r);
  return r == uint64_t(INT64_MAX) + 1 ? INT64_MIN : -int64_t(r);
}

static std::vector<std::string_view> splitWords(std::string_view text) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ')
      ++i;
    size_t j = i;
    while (j < text.size() && text[j] != ' ')
      ++j;
    if (j > i)
      words.push_back(text.substr(i, j - i));
    i = j;
  }
  return words;
}

llvm::Expected<KernelSpec> KernelSpec::parse(std::string_view text) {
  auto words = splitWords(text);
  if (words.empty())
    return specError("empty kernel spec");
  const OpDecl *op = findOp(words[0]);
  if (!op)
    return specError("unknown op '" + llvm::Twine(words[0]) + "' (known: " + knownOpNames() + ")");
  KernelSpec s(*op);
  std::string_view arch = s.target.archName();
  int64_t sms = 0;
  std::vector<bool> seen(op->params.size() + 2, false);
  for (size_t w = 1; w < words.size(); ++w) {
    auto eq = words[w].find('=');
    if (eq == std::string_view::npos)
      return specError("spec field '" + llvm::Twine(words[w]) + "' is not name=value");
    auto k = words[w].substr(0, eq), v = words[w].substr(eq + 1);
    int i = op->index(k);
    size_t slot = i >= 0 ? size_t(i) : k == "arch" ? op->params.size() : op->params.size() + 1;
    if (i < 0 && k != "arch" && k != "sms")
      return specError("unknown spec field '" + llvm::Twine(k) + "' for " + op->name +
                       " (its fields: " + paramNames(*op) + ", arch, sms)");
    if (seen[slot])
      return specError("spec field '" + llvm::Twine(k) + "' is given twice");
    seen[slot] = true;
    if (k == "arch") {
      arch = v;
      continue;
    }
    if (k == "sms") {
      auto n = parseInt(k, v);
      if (!n)
        return n.takeError();
      if (*n < 0 || *n > 1024)
        return specError("sms (multiprocessors) must be in [0, 1024], got " + llvm::Twine(*n));
      sms = *n;
      continue;
    }
    const ParamDecl &p = op->params[size_t(i)];
    if (p.kind == ParamDecl::Type) {
      auto t = parseDType(v);
      if (!t)
        return specError("unknown " + llvm::Twine(p.name) + " '" + llvm::Twine(v) +
                         "' (known: bf16, f16, f32)");
      s.values_[size_t(i)] = int64_t(*t);
      continue;
    }
    auto n = parseInt(k, v);
    if (!n)
      return n.takeError();
    s.values_[size_t(i)] = *n;
  }
  auto target = Target::parse(arch);
  if (!target)
    return specError("unknown arch '" + llvm::Twine(arch) + "' (known: " + Target::knownArchs() +
                     ")");
  s.target = *target;
  if (sms != 0 && sms == s.target.usualSMs())
    return specError("sms = " + llvm::Twine(sms) + " is the usual count of " + arch +
                     ": write 0 (or leave it out), so the spec has one canonical form");
  s.target.sms = int(sms);
  if (auto err = s.validate())
    return err;
  return s;
}

llvm::Error KernelSpec::validate() const {
  if (!op_)
    return specError("the kernel spec names no op (known: " + knownOpNames() + ")");
  for (size_t i = 0; i < op_->params.size(); ++i) {
    const ParamDecl &p = op_->params[i];
    int64_t v = values_[i];
    switch (p.kind) {
    case ParamDecl::Type:
      if (v < int64_t(DType::BF16) || v > int64_t(DType::F32))
        return specError(llvm::Twine(p.name) + " is not a data type (value " + llvm::Twine(v) +
                         ")");
      break;
    case ParamDecl::Bool:
      if (v != 0 && v != 1)
        return specError(llvm::Twine(p.name) + " must be 0 or 1, got " + llvm::Twine(v));
      break;
    case ParamDecl::Int:
      if (v < p.min)
        return specError(llvm::Twine(p.name) + " must be >= " + llvm::Twine(p.min) + ", got " +
                         llvm::Twine(v));
      if (v > p.max)
        return specError(llvm::Twine(p.name) + " = " + llvm::Twine(v) +
                         " is above the largest supported (" + llvm::Twine(p.max) + ")");
      break;
    }
  }
  if (target.sms < 0 || target.sms > 1024)
    return specError("sms (multiprocessors) must be in [1, 1024], or 0 for the usual " +
                     llvm::Twine(target.usualSMs()) + " of " + target.archName() + ", got " +
                     llvm::Twine(target.sms));
  if (target.sms != 0 && target.sms == target.usualSMs())
    return specError("sms = " + llvm::Twine(target.sms) + " is the usual count of " +
                     target.archName() +
                     ": write 0 (or leave it out), so the spec has one canonical form");
  return op_->check ? op_->check(*this) : llvm::Error::success();
}

llvm::Error KernelSpec::checkTarget(const Target &gpu) const {
  if (target.arch == gpu.arch && target.smCount() == gpu.smCount())
    return llvm::Error::success();
  return specError("spec " + llvm::Twine(canonical()) + " is for " + target.archName() + " with " +
                   llvm::Twine(target.smCount()) + " multiprocessors, the GPU is " +
                   gpu.archName() + " with " + llvm::Twine(gpu.smCount()) + " (Target::setSMs)");
}

KernelSpec KernelSpec::tuningSpec() const {
  KernelSpec s = *this;
  if (!op_)
    return s;
  for (size_t i = 0; i < op_->params.size(); ++i) {
    const ParamDecl &p = op_->params[i];
    if (!p.launchTime || p.tuneBucketCap <= 0)
      continue;
    int64_t b = 1;
    while (b < values_[i] && b < p.tuneBucketCap)
      b *= 2;
    s.values_[i] = b;
  }
  return s;
}

bool KernelSpec::sameKernel(const KernelSpec &o) const {
  if (op_ != o.op_ || target != o.target)
    return false;
  if (!op_)
    return true;
  for (size_t i = 0; i < op_->params.size(); ++i)
    if (!op_->params[i].launchTime && values_[i] != o.values_[i])
      return false;
  return true;
}

bool KernelSpec::operator==(const KernelSpec &o) const {
  return op_ == o.op_ && target == o.target && values_ == o.values_;
}

uint64_t KernelSpec::hash(bool withRuntimeSizes) const {
  uint64_t h = 1469598103934665603ull; // FNV-1a
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(reinterpret_cast<uintptr_t>(op_));
  mix(uint64_t(target.arch));
  mix(uint64_t(target.sms));
  if (op_)
    for (size_t i = 0; i < op_->params.size(); ++i)
      if (withRuntimeSizes || !op_->params[i].launchTime)
        mix(uint64_t(values_[i]));
  return h;
}

int64_t TileConfig::get(const std::string &name) const {
  auto it = values.find(name);
  return it == values.end() ? 0 : it->second;
}

std::string TileConfig::canonical() const {
  std::string s;
  for (auto &[k, v] : values) {
    if (!s.empty())
      s += ' ';
    s += k + "=" + std::to_string(v);
  }
  return s;
}

llvm::Expected<TileConfig> TileConfig::parse(std::string_view text) {
  TileConfig c;
  for (auto word : splitWords(text)) {
    auto eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return specError("config field '" + llvm::Twine(word) + "' is not name=value");
    std::string name(word.substr(0, eq));
    if (c.values.count(name))
      return specError("config field '" + llvm::Twine(name) + "' is given twice");
    auto n = parseInt(name, word.substr(eq + 1));
    if (!n)
      return n.takeError();
    c.values[name] = *n;
  }
  return c;
}

TileConfig TileConfig::mergedWith(const TileConfig &partial) const {
  TileConfig c = *this;
  for (auto &[k, v] : partial.values)
    c.values[k] = v;
  return c;
}

llvm::Error TileConfig::checkKeys(llvm::ArrayRef<ConfigKeyDecl> keys) const {
  auto names = [&] {
    std::string s;
    for (const ConfigKeyDecl &k : keys)
      s += (s.empty() ? "" : ", ") + std::string(k.name);
    return s;
  };
  for (auto &[name, v] : values) {
    auto it = std::find_if(keys.begin(), keys.end(),
                           [&](const ConfigKeyDecl &k) { return k.name == name; });
    if (it == keys.end())
      return specError("unknown config key '" + llvm::Twine(name) + "' (declared: " + names() +
                       ")");
    if (v < it->min || v > it->max)
      return specError("config " + llvm::Twine(name) + " must be in [" + llvm::Twine(it->min) +
                       ", " + llvm::Twine(it->max) + "], got " + llvm::Twine(v));
  }
  for (const ConfigKeyDecl &k : keys)
    if (!k.optional && !has(std::string(k.name)))
      return specError("config lacks '" + llvm::Twine(k.name) + "'");
  return llvm::Error::success();
}

int alignmentOf(std::initializer_list<uint64_t> addresses, int64_t rowBytes) {
  int a = 16;
  auto fit = [&](uint64_t v) {
    while (a > 1 && v % a != 0)
      a /= 2;
  };
  for (uint64_t p : addresses)
    fit(p);
  fit(uint64_t(rowBytes));
  return a;
}

} // namespace tilejit
