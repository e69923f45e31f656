//===- Wire.cpp -------------------------------------------------------------===//
#include "service/Wire.h"

#include <cmath>
#include <cstdio>

#include "core/Sha256.h"

#include <algorithm>

namespace tilejit::wire {

grpc::Status invalid(const std::string &field, const std::string &what) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, field + ": " + what);
}

namespace {

bool isHex64(const std::string &s) {
  if (s.size() != 64)
    return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return false;
  return true;
}

grpc::Status checkText(const std::string &text, const std::string &field, size_t max) {
  if (text.size() > max)
    return invalid(field, std::to_string(text.size()) + " bytes, more than the " +
                              std::to_string(max) + " accepted");
  return printable(text, field);
}

} // namespace

grpc::Status printable(const std::string &text, const std::string &field) {
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f) {
      char what[80];
      std::snprintf(what, sizeof what, "byte 0x%02x at offset %zu is not printable ASCII", c, i);
      return invalid(field, what);
    }
  }
  return grpc::Status::OK;
}

grpc::Status specFrom(const std::string &text, const std::string &field, KernelSpec &out) {
  if (text.empty())
    return invalid(field, "empty: a kernel spec is required");
  if (auto s = checkText(text, field, kMaxTextBytes); !s.ok())
    return s;
  auto spec = KernelSpec::parse(text);
  if (!spec)
    return invalid(field, llvm::toString(spec.takeError()));
  // Each size is in its declared range; a product of two of them must still
  // address a buffer (some launch-time sizes are bounded only by int64).
  const OpDecl &op = *spec->op();
  for (size_t i = 0; i < op.params.size(); ++i) {
    if (op.params[i].kind != ParamDecl::Int)
      continue;
    for (size_t j = i + 1; j < op.params.size(); ++j) {
      if (op.params[j].kind != ParamDecl::Int)
        continue;
      int64_t product;
      if (__builtin_mul_overflow((*spec)[int(i)], (*spec)[int(j)], &product) ||
          __builtin_mul_overflow(product, int64_t(4), &product))
        return invalid(field, std::string(op.params[i].name) + " * " +
                                  std::string(op.params[j].name) +
                                  " elements of 4 bytes overflow 64 bits");
    }
  }
  out = *spec;
  return grpc::Status::OK;
}

grpc::Status configFrom(const std::string &text, const std::string &field, TileConfig &out) {
  if (auto s = checkText(text, field, kMaxTextBytes); !s.ok())
    return s;
  if (text.empty()) {
    out = TileConfig();
    return grpc::Status::OK;
  }
  auto config = TileConfig::parse(text);
  if (!config)
    return invalid(field, llvm::toString(config.takeError()));
  out = *config;
  return grpc::Status::OK;
}

grpc::Status backendFrom(v1::Backend b, const std::string &field, Backend &out) {
  switch (b) {
  case v1::BACKEND_UNSPECIFIED:
  case v1::BACKEND_NVPTX:
    out = Backend::Nvptx;
    return grpc::Status::OK;
  case v1::BACKEND_CUDA:
    out = Backend::Cuda;
    return grpc::Status::OK;
  default:
    return invalid(field, "unknown back end " + std::to_string(int(b)) +
                              " (known: " + backendNames() + ")");
  }
}

v1::Backend backendTo(Backend b) {
  return b == Backend::Cuda ? v1::BACKEND_CUDA : v1::BACKEND_NVPTX;
}

std::string sha256Of(const StoredKernel &k) {
  return k.sha256.empty() ? sha256Hex(std::string_view(k.cubin.data(), k.cubin.size())) : k.sha256;
}

bool isSha256Hex(const std::string &s) { return isHex64(s); }

void kernelTo(const StoredKernel &k, Backend backend, v1::Kernel &out, bool withCode) {
  out.set_spec(k.spec);
  out.set_config(k.config);
  out.set_key(k.key);
  out.set_backend(backendTo(backend));
  if (withCode) {
    out.set_cubin(k.cubin.data(), k.cubin.size());
    out.set_entries_json(k.launch);
  }
  out.set_workspace_bytes(k.workspaceBytes);
  out.set_sha256(sha256Of(k));
}

StoredKernel storedFrom(const KernelBinary &k, const std::string &ptx,
                        const std::string &toolchain) {
  StoredKernel sk;
  sk.key = k.key;
  sk.spec = k.spec.canonical(false);
  sk.config = k.config.canonical();
  sk.arch = std::string(k.spec.target.archName());
  sk.toolchain = toolchain;
  sk.cubin = k.cubin;
  sk.ptx = ptx;
  sk.launch = entriesToJson(k.entries);
  sk.workspaceBytes = k.workspaceBytes;
  return sk;
}

grpc::Status kernelFrom(const v1::Kernel &k, const std::string &field, StoredKernel &out) {
  if (auto s = printable(k.entries_json(), field + ".entries_json"); !s.ok())
    return s;
  if (!isHex64(k.key()))
    return invalid(field + ".key", "not 64 lower-case hex digits");
  if (k.cubin().empty())
    return invalid(field + ".cubin", "empty");
  std::string sha = sha256Hex(k.cubin());
  if (k.sha256() != sha)
    return invalid(field + ".sha256", "does not match the cubin's SHA-256 (" + sha + ")");
  auto entries = entriesFromJson(k.entries_json());
  if (!entries)
    return invalid(field + ".entries_json", llvm::toString(entries.takeError()));
  if (k.workspace_bytes() < 0)
    return invalid(field + ".workspace_bytes", "negative");
  out = StoredKernel();
  out.key = k.key();
  out.spec = k.spec();
  out.config = k.config();
  out.cubin.assign(k.cubin().begin(), k.cubin().end());
  out.launch = k.entries_json();
  out.workspaceBytes = k.workspace_bytes();
  return grpc::Status::OK;
}

llvm::Expected<KernelBinary> binaryFrom(const v1::Kernel &k, bool withCode) {
  auto fail = [](const std::string &msg) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "kernel from the server: " + msg);
  };
  KernelBinary b;
  auto spec = KernelSpec::parse(k.spec());
  if (!spec)
    return fail("spec: " + llvm::toString(spec.takeError()));
  auto config = TileConfig::parse(k.config());
  if (!config)
    return fail("config: " + llvm::toString(config.takeError()));
  if (!withCode) {
    if (!isHex64(k.sha256()))
      return fail("sha256 is not 64 lower-case hex digits");
    if (!k.cubin().empty() || !k.entries_json().empty())
      return fail("a kernel sent without its code carries a cubin or entry points");
  } else {
    if (sha256Hex(k.cubin()) != k.sha256())
      return fail("the cubin's SHA-256 does not match " + k.sha256());
    auto entries = entriesFromJson(k.entries_json());
    if (!entries)
      return fail("entries_json: " + llvm::toString(entries.takeError()));
    b.entries = std::move(*entries);
  }
  b.spec = *spec;
  b.config = *config;
  b.key = k.key();
  b.backend = k.backend() == v1::BACKEND_CUDA ? "cuda" : "nvptx";
  b.cubin.assign(k.cubin().begin(), k.cubin().end());
  b.workspaceBytes = k.workspace_bytes();
  return b;
}

grpc::Status timingFrom(const v1::Timing &t, const std::string &field, Timing &out) {
  TileConfig config;
  if (auto s = configFrom(t.config(), field + ".config", config); !s.ok())
    return s;
  if (t.config().empty())
    return invalid(field + ".config", "empty");
  for (auto [name, v] : {std::pair<const char *, double>{"median_ms", t.median_ms()},
                         {"p20_ms", t.p20_ms()},
                         {"p80_ms", t.p80_ms()}})
    if (!std::isfinite(v) || v < 0)
      return invalid(field + "." + name, "not a finite time >= 0");
  if (t.reps() < 0)
    return invalid(field + ".reps", "negative");
  if (auto s = checkText(t.gpu(), field + ".gpu", kMaxNameBytes); !s.ok())
    return s;
  out = Timing();
  out.config = config.canonical();
  out.medianMs = t.median_ms();
  out.p20Ms = t.p20_ms();
  out.p80Ms = t.p80_ms();
  out.reps = t.reps();
  out.gpu = t.gpu();
  out.smCount = t.sm_count();
  out.driverVersion = t.driver_version();
  out.smClockMHz = t.sm_clock_mhz();
  out.memClockMHz = t.mem_clock_mhz();
  return grpc::Status::OK;
}

void timingTo(const Timing &t, v1::Timing &out) {
  out.set_config(t.config);
  out.set_median_ms(t.medianMs);
  out.set_p20_ms(t.p20Ms);
  out.set_p80_ms(t.p80Ms);
  out.set_reps(t.reps);
  out.set_gpu(t.gpu);
  out.set_sm_count(t.smCount);
  out.set_driver_version(t.driverVersion);
  out.set_sm_clock_mhz(t.smClockMHz);
  out.set_mem_clock_mhz(t.memClockMHz);
}

void publicationTo(const Publication &p, v1::PublishResultRequest &out) {
  out.set_lease_id(p.leaseId);
  out.set_spec(p.spec.canonical());
  out.set_backend(backendTo(p.backend));
  out.set_winner_config(p.winner.canonical());
  out.set_winner_ms(p.winnerMs);
  out.set_reason(p.reason);
  for (const Timing &t : p.timings)
    timingTo(t, *out.add_timings());
  if (p.kernel)
    kernelTo(*p.kernel, p.backend, *out.mutable_kernel());
}

llvm::Expected<TuningLease> leaseFrom(const v1::AcquireTuningLeaseResponse &r) {
  auto best = TileConfig::parse(r.best_config());
  if (!best)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "tuning lease from the server: best_config: " +
                                       llvm::toString(best.takeError()));
  TuningLease l;
  l.granted = r.granted();
  l.id = r.lease_id();
  l.holder = r.holder();
  l.tuneKey = r.tune_key();
  l.expiresIn = std::chrono::milliseconds(r.expires_in_ms());
  l.best = std::move(*best);
  l.bestIsTuned = r.best_is_tuned();
  return l;
}

std::optional<ImageAssembler::Problem>
ImageAssembler::add(int64_t totalBytes, const std::string &sha256, const std::string &data) {
  if (chunks_ == 0) {
    if (totalBytes <= 0 || totalBytes > maxBytes_)
      return Problem{"total_bytes", std::to_string(totalBytes) + " is not in [1, " +
                                        std::to_string(maxBytes_) + "]"};
    if (sha256.size() != 64 || sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
      return Problem{"sha256", "not 64 lower-case hex digits"};
    total_ = totalBytes;
    sha256_ = sha256;
    image_.reserve(size_t(std::min<int64_t>(total_, int64_t(64) << 20)));
  } else if (totalBytes != 0 || !sha256.empty()) {
    return Problem{"total_bytes",
                   "given again in chunk " + std::to_string(chunks_) + " (the first chunk only)"};
  } else if (data.empty()) {
    // A stream of empty chunks would hold its reader without end.
    return Problem{"data", "empty in chunk " + std::to_string(chunks_) +
                               " (only the first chunk may be empty)"};
  }
  if (int64_t(image_.size() + data.size()) > total_)
    return Problem{"data",
                   "more than the " + std::to_string(total_) + " bytes total_bytes declared"};
  image_ += data;
  ++chunks_;
  return std::nullopt;
}

std::optional<ImageAssembler::Problem> ImageAssembler::finish() const {
  if (chunks_ == 0)
    return Problem{"total_bytes", "no chunk: the bytes of a store file are required"};
  if (int64_t(image_.size()) != total_)
    return Problem{"data", std::to_string(image_.size()) + " bytes arrived, not the " +
                               std::to_string(total_) + " total_bytes declared"};
  if (sha256Hex(image_) != sha256_)
    return Problem{"sha256", "the bytes that arrived do not have the declared digest"};
  return std::nullopt;
}

} // namespace tilejit::wire
