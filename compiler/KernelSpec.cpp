//===- KernelSpec.cpp -----------------------------------------------------===//
#include "compiler/KernelSpec.h"

#include <sstream>
#include <vector>

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

std::string_view opName(OpKind op) {
  switch (op) {
  case OpKind::RmsNormFwd:
    return "rmsnorm_fwd";
  case OpKind::RmsNormBwd:
    return "rmsnorm_bwd";
  }
  return "?";
}

std::optional<OpKind> parseOpKind(std::string_view n) {
  if (n == "rmsnorm_fwd")
    return OpKind::RmsNormFwd;
  if (n == "rmsnorm_bwd")
    return OpKind::RmsNormBwd;
  return std::nullopt;
}

bool isKnownArch(std::string_view a) {
  return a == "sm_80" || a == "sm_86" || a == "sm_89" || a == "sm_90" || a == "sm_90a";
}

bool hasClusters(std::string_view arch) { return arch == "sm_90" || arch == "sm_90a"; }

int assumedSMCount(std::string_view arch) {
  if (arch == "sm_90" || arch == "sm_90a")
    return 132;
  if (arch == "sm_80")
    return 108;
  return 84;
}

std::string KernelSpec::canonical(bool withRuntimeSizes) const {
  std::ostringstream os;
  os << opName(op) << " dtype=" << dtypeName(dtype) << " wdtype=" << dtypeName(wdtype);
  if (withRuntimeSizes)
    os << " rows=" << rows;
  os << " cols=" << cols << " zcg=" << (zeroCenteredGamma ? 1 : 0) << " align=" << align
     << " arch=" << arch;
  if (sms != 0)
    os << " sms=" << sms;
  return os.str();
}

static llvm::Error specError(const llvm::Twine &msg) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), msg);
}

static llvm::Expected<int64_t> parseInt(std::string_view field, std::string_view v) {
  if (v.empty())
    return specError("'" + llvm::Twine(field) + "' has no value");
  int64_t r = 0;
  size_t i = 0;
  bool neg = v[0] == '-';
  if (neg)
    i = 1;
  if (i == v.size())
    return specError("'" + llvm::Twine(field) + "=" + llvm::Twine(v) + "' is not an integer");
  for (; i < v.size(); ++i) {
    if (v[i] < '0' || v[i] > '9' || r > (INT64_MAX - 9) / 10)
      return specError("'" + llvm::Twine(field) + "=" + llvm::Twine(v) + "' is not an integer");
    r = r * 10 + (v[i] - '0');
  }
  return neg ? -r : r;
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
  KernelSpec s;
  auto op = parseOpKind(words[0]);
  if (!op)
    return specError("unknown op '" + llvm::Twine(words[0]) +
                     "' (known: rmsnorm_fwd, rmsnorm_bwd)");
  s.op = *op;
  for (size_t w = 1; w < words.size(); ++w) {
    auto eq = words[w].find('=');
    if (eq == std::string_view::npos)
      return specError("spec field '" + llvm::Twine(words[w]) + "' is not name=value");
    auto k = words[w].substr(0, eq), v = words[w].substr(eq + 1);
    if (k == "dtype" || k == "wdtype") {
      auto t = parseDType(v);
      if (!t)
        return specError("unknown dtype '" + llvm::Twine(v) + "' (known: bf16, f16, f32)");
      (k == "dtype" ? s.dtype : s.wdtype) = *t;
    } else if (k == "arch") {
      s.arch = std::string(v);
    } else if (k == "rows" || k == "cols" || k == "zcg" || k == "align" || k == "sms") {
      auto n = parseInt(k, v);
      if (!n)
        return n.takeError();
      if (k == "rows")
        s.rows = *n;
      else if (k == "cols")
        s.cols = *n;
      else if (k == "zcg")
        s.zeroCenteredGamma = *n != 0;
      else if (k == "sms") {
        if (*n < 0 || *n > 1024)
          return specError("sms (multiprocessors) must be in [0, 1024], got " + llvm::Twine(*n));
        s.sms = int(*n);
      } else
        s.align = int(*n);
    } else {
      return specError("unknown spec field '" + llvm::Twine(k) + "'");
    }
  }
  if (auto err = s.validate())
    return err;
  return s;
}

llvm::Error KernelSpec::validate() const {
  if (rows < 1)
    return specError("rows must be >= 1, got " + llvm::Twine(rows));
  if (cols < 1)
    return specError("cols must be >= 1, got " + llvm::Twine(cols));
  if (cols > (int64_t(1) << 20))
    return specError("cols = " + llvm::Twine(cols) +
                     " is above the largest supported row (1048576)");
  if (align != 1 && align != 2 && align != 4 && align != 8 && align != 16)
    return specError("align must be 1, 2, 4, 8 or 16 bytes, got " + llvm::Twine(align));
  if (align < dtypeBytes(dtype))
    return specError("align = " + llvm::Twine(align) + " is below the " +
                     llvm::Twine(dtypeBytes(dtype)) + "-byte size of " +
                     llvm::Twine(dtypeName(dtype)));
  int64_t rowBytes = cols * dtypeBytes(dtype);
  if (rowBytes % align != 0)
    return specError("align = " + llvm::Twine(align) + " cannot hold: a row of " +
                     llvm::Twine(cols) + " " + llvm::Twine(dtypeName(dtype)) + " is " +
                     llvm::Twine(rowBytes) + " bytes, so rows are at most " +
                     llvm::Twine(alignmentOf({}, rowBytes)) + "-byte aligned");
  if (!isKnownArch(arch))
    return specError("unknown arch '" + llvm::Twine(arch) +
                     "' (known: sm_80, sm_86, sm_89, sm_90, sm_90a)");
  if (sms < 0 || sms > 1024)
    return specError("sms (multiprocessors) must be in [1, 1024], or 0 for the usual " +
                     llvm::Twine(assumedSMCount(arch)) + " of " + llvm::Twine(arch) + ", got " +
                     llvm::Twine(sms));
  if (sms == assumedSMCount(arch))
    return specError("sms = " + llvm::Twine(sms) + " is the usual count of " + llvm::Twine(arch) +
                     ": write 0 (or leave it out), so the spec has one canonical form");
  return llvm::Error::success();
}

llvm::Error KernelSpec::checkTarget(std::string_view gpuArch, int gpuSms) const {
  if (arch == gpuArch && targetSMs() == gpuSms)
    return llvm::Error::success();
  return specError("spec " + llvm::Twine(canonical()) + " is for " + arch + " with " +
                   llvm::Twine(targetSMs()) + " multiprocessors, the GPU is " + gpuArch + " with " +
                   llvm::Twine(gpuSms) + " (KernelSpec::setTargetSMs)");
}

uint64_t KernelSpec::hash(bool withRuntimeSizes) const {
  // FNV-1a over the fields, then the arch text.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(uint64_t(op));
  mix(uint64_t(dtype));
  mix(uint64_t(wdtype));
  if (withRuntimeSizes)
    mix(uint64_t(rows));
  mix(uint64_t(cols));
  mix(uint64_t(zeroCenteredGamma));
  mix(uint64_t(align));
  mix(uint64_t(sms));
  for (char c : arch) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
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
    auto n = parseInt(word.substr(0, eq), word.substr(eq + 1));
    if (!n)
      return n.takeError();
    c.values[std::string(word.substr(0, eq))] = *n;
  }
  return c;
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
