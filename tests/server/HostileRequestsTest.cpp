//===- HostileRequestsTest.cpp - fuzzed requests against a real server -----===//
//
// A server on 127.0.0.1 with read-write and read-only tokens and a 1 MiB
// message cap takes a seeded stream of hostile requests: well-formed messages
// whose fields are fuzzed (sizes out of range or overflowing, unknown enums,
// bytes that are not text, empty and over-long strings) on every RPC, and
// frames that are not messages at all (random bytes, truncated or damaged
// serializations, frames over the cap) through a generic stub. Every one must
// be answered with a status within its deadline, and the store must be byte
// for byte what it was. Then the valid specs the fuzz made that the store
// lacked are compiled (a few, sizes as large as their ranges allow): each is
// compiled or refused with a reason, and those kernels are all that is new.
// Connections that are not HTTP/2, or stop inside a frame, are closed. The
// server still serves at the end. TILEJIT_TEST_SEED replays a run.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "autotune/Tuner.h"
#include "compiler/templates/Template.h"
#include "core/Sha256.h"
#include "health.grpc.pb.h"
#include "runtime/Store.h"
#include "service/Server.h"
#include "tests/support/Seed.h"
#include "tests/support/TempDir.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using grpc::StatusCode;

namespace {

constexpr const char *kReadWrite = "rw-token-0123456789";
constexpr const char *kReadOnly = "ro-token-0123456789";
constexpr int kMaxMessage = 1 << 20;
// A hang is a failure, not a slow pass: no fuzzed call needs a compile.
constexpr auto kCallDeadline = std::chrono::seconds(20);
// Fuzzed specs that are valid are compiled, however large their sizes, but
// only this many: a compile is slower than a refusal.
constexpr size_t kMaxCompiles = 12;
constexpr const char *kStoredSpec = "rmsnorm_fwd rows=64 cols=1024";

using Rng = std::mt19937_64;

size_t below(Rng &rng, size_t n) { return n ? size_t(rng() % n) : 0; }
bool chance(Rng &rng, int percent) { return int(rng() % 100) < percent; }
template <class T> const T &pick(Rng &rng, const std::vector<T> &v) {
  return v[below(rng, v.size())];
}

std::string randomBytes(Rng &rng, size_t n) {
  std::string s(n, '\0');
  for (char &c : s)
    c = char(rng());
  return s;
}

std::string randomPrintable(Rng &rng, size_t n) {
  std::string s(n, ' ');
  for (char &c : s)
    c = char(0x20 + below(rng, 0x5f));
  return s;
}

/// Text a text field might hold: empty, printable, binary, or at and past
/// the server's limits.
std::string fuzzText(Rng &rng) {
  switch (below(rng, 8)) {
  case 0:
    return "";
  case 1:
    return randomBytes(rng, 1 + below(rng, 40));
  case 2:
    return randomPrintable(rng, 64 + below(rng, 2)); // a lease id's limit
  case 3:
    return randomPrintable(rng, 255 + below(rng, 3)); // a name's limit
  case 4:
    return randomPrintable(rng, 4095 + below(rng, 3)); // a text's limit
  case 5:
    return randomPrintable(rng, 5000 + below(rng, 60000));
  default:
    return randomPrintable(rng, 1 + below(rng, 40));
  }
}

/// A value for an integer spec field, as text: in range, at and past the
/// declared bounds, at the limits of int64 and past them, or not a number.
std::string fuzzInt(Rng &rng, int64_t min, int64_t max) {
  static const std::vector<std::string> odd = {"",
                                               "-",
                                               "+5",
                                               "0x10",
                                               "1e9",
                                               "--1",
                                               "9223372036854775808",
                                               "-9223372036854775809",
                                               "99999999999999999999999",
                                               "0.5",
                                               " ",
                                               "1,024"};
  switch (below(rng, 12)) {
  case 0:
    return pick(rng, odd);
  case 1:
    return std::to_string(std::numeric_limits<int64_t>::max());
  case 2:
    return std::to_string(std::numeric_limits<int64_t>::min());
  case 3:
    return std::to_string(int64_t(rng()));
  case 4:
    return std::to_string(min - (min > INT64_MIN ? 1 : 0));
  case 5:
    return std::to_string(max + (max < INT64_MAX ? 1 : 0));
  case 6:
    return std::to_string(max);
  case 7:
    return std::to_string(int64_t(1) << below(rng, 63));
  case 8:
    return std::to_string(-int64_t(below(rng, 1000)));
  default: {
    // In range, and mostly small: a spec the server accepts.
    int64_t hi = std::min<int64_t>(max, min + 4096);
    return std::to_string(min + int64_t(below(rng, size_t(hi - min) + 1)));
  }
  }
}

/// A kernel spec: mostly a known op with fuzzed fields, sometimes no spec at
/// all.
std::string fuzzSpec(Rng &rng) {
  if (chance(rng, 10))
    return fuzzText(rng);
  auto ops = allOps();
  const OpDecl &op = *ops[below(rng, ops.size())];
  // A third keep every size in its declared range, extremes included: the
  // spec is then often valid and reaches the code past the parser.
  bool inRange = chance(rng, 33);
  std::vector<std::string> fields;
  for (const ParamDecl &p : op.params) {
    if (!chance(rng, 60))
      continue;
    std::string v;
    switch (p.kind) {
    case ParamDecl::Type:
      v = pick(rng, std::vector<std::string>{"bf16", "f16", "f32", "fp16", "int4", "", "f64"});
      break;
    case ParamDecl::Bool:
      v = pick(rng, std::vector<std::string>{"0", "1", "2", "-1", "true"});
      break;
    case ParamDecl::Int:
      v = inRange ? std::to_string(pick(
                        rng, std::vector<int64_t>{p.min, p.max, p.defaultValue,
                                                  p.min + int64_t(uint64_t(rng()) %
                                                                  (uint64_t(p.max - p.min) + 1))}))
                  : fuzzInt(rng, p.min, p.max);
      break;
    }
    fields.push_back(std::string(p.name) + "=" + v);
  }
  if (chance(rng, 20))
    fields.push_back("arch=" + pick(rng, std::vector<std::string>{"sm_80", "sm_90a", "sm_90",
                                                                  "sm_99", "", "SM_90A"}));
  if (chance(rng, 10))
    fields.push_back("sms=" + fuzzInt(rng, 0, 1024));
  if (chance(rng, 5))
    fields.push_back(randomPrintable(rng, 1 + below(rng, 10)) + "=1");
  if (chance(rng, 5) && !fields.empty())
    fields.push_back(fields[0]); // a field given twice
  std::shuffle(fields.begin(), fields.end(), rng);
  std::string text = chance(rng, 5) ? randomPrintable(rng, 8) : std::string(op.name);
  for (const std::string &f : fields)
    text += (chance(rng, 10) ? "  " : " ") + f;
  return text;
}

/// A tile config: mostly the keys the op's template declares, with fuzzed
/// values.
std::string fuzzConfig(Rng &rng, const std::string &spec) {
  if (chance(rng, 40))
    return "";
  if (chance(rng, 15))
    return fuzzText(rng);
  auto parsed = KernelSpec::parse(spec);
  const KernelTemplate *tmpl = parsed ? findTemplate(parsed->op()) : nullptr;
  if (!parsed)
    llvm::consumeError(parsed.takeError());
  if (!tmpl)
    return "threads=" + fuzzInt(rng, 32, 1024);
  std::string text;
  for (const ConfigKeyDecl &k : tmpl->configKeys())
    if (chance(rng, 85))
      text += (text.empty() ? "" : " ") + std::string(k.name) + "=" + fuzzInt(rng, k.min, k.max);
  return text;
}

v1::Backend fuzzBackend(Rng &rng) {
  if (chance(rng, 80))
    return v1::Backend(below(rng, 3));
  return v1::Backend(int32_t(
      pick(rng, std::vector<int64_t>{3, -1, 1000, INT32_MAX, INT32_MIN, int64_t(int32_t(rng()))})));
}

double fuzzDouble(Rng &rng) {
  return pick(rng, std::vector<double>{0.0, 1.5, -1.0, std::nan(""),
                                       std::numeric_limits<double>::infinity(),
                                       -std::numeric_limits<double>::infinity(), 1e308,
                                       std::numeric_limits<double>::denorm_min()});
}

v1::KernelRequest fuzzKernelRequest(Rng &rng) {
  v1::KernelRequest r;
  r.set_spec(chance(rng, 10) ? std::string(kStoredSpec) : fuzzSpec(rng));
  r.set_config(fuzzConfig(rng, r.spec()));
  r.set_backend(fuzzBackend(rng));
  return r;
}

v1::AcquireTuningLeaseRequest fuzzLease(Rng &rng) {
  v1::AcquireTuningLeaseRequest r;
  r.set_spec(fuzzSpec(rng));
  r.set_backend(fuzzBackend(rng));
  r.set_holder(chance(rng, 50) ? "tuner-" + std::to_string(below(rng, 100)) : fuzzText(rng));
  r.set_ttl_ms(pick(rng, std::vector<int64_t>{0, -1, 99, 100, 1000, 60000, 60001, INT64_MAX,
                                              INT64_MIN, int64_t(rng())}));
  if (chance(rng, 30))
    r.set_lease_id(fuzzText(rng));
  return r;
}

/// A publish that is valid but for its lease (`config` is a valid config of
/// kStoredSpec), with at most one field fuzzed.
v1::PublishResultRequest nearlyValidPublish(Rng &rng, const std::string &config) {
  v1::PublishResultRequest r;
  r.set_lease_id(randomPrintable(rng, 32));
  r.set_spec(kStoredSpec);
  r.set_winner_config(config);
  r.set_winner_ms(0.5);
  switch (below(rng, 8)) {
  case 0:
    r.set_winner_ms(fuzzDouble(rng));
    break;
  case 1:
    r.set_reason(fuzzText(rng));
    break;
  case 2:
    r.set_lease_id(fuzzText(rng));
    break;
  case 3: {
    v1::Timing *t = r.add_timings();
    t->set_config(chance(rng, 50) ? config : fuzzConfig(rng, kStoredSpec));
    t->set_median_ms(fuzzDouble(rng));
    t->set_reps(int32_t(rng()));
    t->set_gpu(fuzzText(rng));
    break;
  }
  case 4:
    r.set_backend(fuzzBackend(rng));
    break;
  case 5:
    r.set_winner_config(fuzzConfig(rng, kStoredSpec));
    break;
  default:
    break;
  }
  return r;
}

v1::PublishResultRequest fuzzPublish(Rng &rng) {
  v1::PublishResultRequest r;
  // Never a lease the server granted: a publish here can only be refused.
  r.set_lease_id(chance(rng, 50) ? randomPrintable(rng, 32) : fuzzText(rng));
  r.set_spec(chance(rng, 30) ? std::string(kStoredSpec) : fuzzSpec(rng));
  r.set_backend(fuzzBackend(rng));
  r.set_winner_config(fuzzConfig(rng, r.spec()));
  r.set_winner_ms(fuzzDouble(rng));
  if (chance(rng, 30))
    r.set_reason(fuzzText(rng));
  for (size_t i = 0, n = chance(rng, 20) ? below(rng, 5) : 0; i < n; ++i) {
    v1::Timing *t = r.add_timings();
    t->set_config(fuzzConfig(rng, r.spec()));
    t->set_median_ms(fuzzDouble(rng));
    t->set_p20_ms(fuzzDouble(rng));
    t->set_reps(int32_t(rng()));
    t->set_gpu(fuzzText(rng));
    t->set_sm_count(int32_t(rng()));
  }
  if (chance(rng, 20)) {
    v1::Kernel *k = r.mutable_kernel();
    k->set_key(chance(rng, 50) ? randomPrintable(rng, 64) : fuzzText(rng));
    k->set_cubin(randomBytes(rng, below(rng, 300)));
    k->set_sha256(fuzzText(rng));
    k->set_entries_json(chance(rng, 50) ? "[]" : fuzzText(rng));
    k->set_workspace_bytes(int64_t(rng()));
    k->set_backend(fuzzBackend(rng));
  }
  return r;
}

/// A store file's bytes an Import refuses or takes without writing: garbage,
/// or the server's own export (whose rows it has), cut short or with its
/// header damaged.
std::string fuzzImage(Rng &rng, const std::string &image) {
  switch (below(rng, 5)) {
  case 0:
    return randomBytes(rng, below(rng, 5000));
  case 1:
    return std::string("SQLite format 3\0", 16) + randomBytes(rng, below(rng, 5000));
  case 2:
    return image.substr(0, below(rng, image.size()));
  case 3: {
    std::string damaged = image;
    for (size_t i = 0, n = 1 + below(rng, 4); i < n; ++i)
      damaged[below(rng, 100)] = char(rng());
    return damaged;
  }
  default:
    return image;
  }
}

class Hostile {
public:
  explicit Hostile(uint64_t seed) : rng_(seed) {
    ServerOptions o;
    o.dbPath = dir_.file("t.db");
    o.tokens = {{kReadWrite, false}, {kReadOnly, true}};
    o.maxMessageBytes = kMaxMessage;
    o.maxLeaseTtl = std::chrono::minutes(1);
    o.log = [](const std::string &) {};
    // A Tune that passes its checks must change nothing either: this
    // server has no GPU to tune on, on every machine.
    o.tuneSetup = [](TuneOptions &) {
      return llvm::createStringError(llvm::inconvertibleErrorCode(), "no GPU in this test");
    };
    auto s = Server::start(std::move(o), "127.0.0.1:0");
    if (!s) {
      ADD_FAILURE() << llvm::toString(s.takeError());
      return;
    }
    server_ = std::move(*s);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::TileJit::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  bool ready() const { return bool(server_); }
  int port() const { return server_->port(); }
  /// The config of the kernel in the store: one a publish may name.
  void setStoredConfig(const std::string &config) { storedConfig_ = config; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  v1::TileJit::Stub &stub() { return *stub_; }
  const tilejit::testing::TempDir &dir() const { return dir_; }

  std::unique_ptr<grpc::ClientContext> context(const std::string &token = "") {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    if (!token.empty())
      ctx->AddMetadata("authorization", token);
    return ctx;
  }

  /// The authorization header of a write: none, a wrong or malformed one,
  /// the read-only token, or (`readWrite`) the read-write one.
  std::string fuzzAuthorization(bool readWrite) {
    // Half the writes that may carry the read-write token do: their fields
    // are checked past the token.
    if (readWrite && chance(rng_, 50))
      return "Bearer " + std::string(kReadWrite);
    switch (below(rng_, 5)) {
    case 0:
      return "";
    case 1:
      return "Bearer " + randomPrintable(rng_, below(rng_, 40));
    case 2:
      return pick(rng_, std::vector<std::string>{
                            "Bearer", "Bearer ", "bearer " + std::string(kReadWrite),
                            std::string(kReadWrite), "Basic " + std::string(kReadWrite),
                            "Bearer " + std::string(kReadWrite) + " "});
    default:
      return "Bearer " + std::string(kReadOnly);
    }
  }

  /// The server's store as Export sends it, its chunks joined.
  std::string exported() {
    auto ctx = context();
    auto reader = stub_->Export(ctx.get(), v1::ExportRequest());
    std::string image;
    v1::ExportChunk c;
    while (reader->Read(&c))
      image += c.data();
    grpc::Status s = reader->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
    return image;
  }

  /// Import of `image` in chunks of `chunk` bytes, the first declaring
  /// `total` bytes with digest `digest`.
  grpc::Status importChunks(const std::string &auth, const std::string &image, size_t chunk,
                            int64_t total, const std::string &digest, v1::ImportResponse &resp) {
    auto ctx = context(auth);
    auto writer = stub_->Import(ctx.get(), &resp);
    size_t at = 0;
    do {
      v1::ImportChunk c;
      if (at == 0) {
        c.set_total_bytes(total);
        c.set_sha256(digest);
      }
      size_t n = std::min(chunk, image.size() - at);
      c.set_data(image.substr(at, n));
      at += n;
      if (!writer->Write(c))
        break;
    } while (at < image.size());
    writer->WritesDone();
    return writer->Finish();
  }

  /// One fuzzed, well-formed request on a random RPC; checks its answer.
  void structured(const std::string &image) {
    switch (below(rng_, 11)) {
    case 0:
    case 1:
    case 2: {
      // Lookup first: a GetKernel is sent only when Lookup says it would
      // not compile (refused, or in the store), and must answer alike.
      v1::KernelRequest r = fuzzKernelRequest(rng_);
      v1::LookupResponse l;
      grpc::Status s = stub_->Lookup(context().get(), r, &l);
      expectIn("Lookup '" + printableOf(r.spec()) + "' [" + printableOf(r.config()) + "]", s,
               {StatusCode::OK, StatusCode::INVALID_ARGUMENT});
      if (s.ok() && !l.found()) {
        // Valid and not in the store: kept for the compiling phase.
        if (toCompile_.size() < kMaxCompiles)
          toCompile_.push_back(r);
        return;
      }
      v1::ExplainResponse e;
      expectIn("Explain '" + printableOf(r.spec()) + "' [" + printableOf(r.config()) + "]",
               stub_->Explain(context().get(), r, &e), {s.error_code()});
      v1::GetKernelResponse g;
      grpc::Status gs = stub_->GetKernel(context().get(), r, &g);
      expectIn("GetKernel '" + printableOf(r.spec()) + "' [" + printableOf(r.config()) + "]", gs,
               {s.error_code()});
      if (gs.ok()) {
        EXPECT_EQ(g.source(), v1::GetKernelResponse::SOURCE_STORE);
      }
      return;
    }
    case 3: {
      v1::AcquireTuningLeaseRequest r = fuzzLease(rng_);
      v1::AcquireTuningLeaseResponse resp;
      std::string auth = fuzzAuthorization(true);
      expectIn("AcquireTuningLease '" + printableOf(r.spec()) + "' (" + printableOf(auth) + ")",
               stub_->AcquireTuningLease(context(auth).get(), r, &resp),
               expectedForWrite(auth, {StatusCode::OK, StatusCode::INVALID_ARGUMENT}));
      return;
    }
    case 9: {
      v1::ReleaseTuningLeaseRequest r;
      r.set_spec(chance(rng_, 30) ? std::string(kStoredSpec) : fuzzSpec(rng_));
      r.set_backend(fuzzBackend(rng_));
      r.set_lease_id(chance(rng_, 50) ? randomPrintable(rng_, 32) : fuzzText(rng_));
      v1::ReleaseTuningLeaseResponse resp;
      std::string auth = fuzzAuthorization(true);
      grpc::Status s = stub_->ReleaseTuningLease(context(auth).get(), r, &resp);
      expectIn("ReleaseTuningLease '" + printableOf(r.spec()) + "' (" + printableOf(auth) + ")", s,
               expectedForWrite(auth, {StatusCode::OK, StatusCode::INVALID_ARGUMENT}));
      return;
    }
    case 10: {
      v1::TuneRequest r;
      r.set_spec(chance(rng_, 30) ? std::string(kStoredSpec) : fuzzSpec(rng_));
      r.set_backend(fuzzBackend(rng_));
      if (chance(rng_, 50))
        r.set_holder(fuzzText(rng_));
      r.set_max_configs(pick(rng_, std::vector<int32_t>{0, 1, -1, INT32_MAX, int32_t(rng_())}));
      r.set_budget_seconds(chance(rng_, 50) ? 0 : fuzzDouble(rng_));
      r.set_reps(pick(rng_, std::vector<int32_t>{0, 3, -1, INT32_MAX, int32_t(rng_())}));
      std::string auth = fuzzAuthorization(true);
      auto ctx = context(auth);
      auto reader = stub_->Tune(ctx.get(), r);
      v1::TuneProgress m;
      int messages = 0;
      while (reader->Read(&m))
        ++messages;
      grpc::Status s = reader->Finish();
      EXPECT_EQ(messages, 0) << "a Tune was streamed on a server that cannot tune";
      expectIn(
          "Tune '" + printableOf(r.spec()) + "' (" + printableOf(auth) + ")", s,
          expectedForWrite(auth, {StatusCode::INVALID_ARGUMENT, StatusCode::FAILED_PRECONDITION}));
      return;
    }
    case 4: {
      v1::PublishResultRequest r =
          chance(rng_, 40) ? nearlyValidPublish(rng_, storedConfig_) : fuzzPublish(rng_);
      std::string auth = fuzzAuthorization(true);
      v1::PublishResultResponse resp;
      grpc::Status s = stub_->PublishResult(context(auth).get(), r, &resp);
      expectIn(
          "PublishResult '" + printableOf(r.spec()) + "' (" + printableOf(auth) + ")", s,
          expectedForWrite(auth, {StatusCode::INVALID_ARGUMENT, StatusCode::FAILED_PRECONDITION}));
      return;
    }
    case 5: {
      // In chunks of any size, declaring its size and digest truly or not.
      std::string bytes = fuzzImage(rng_, image);
      int64_t total = int64_t(bytes.size());
      std::string digest = sha256Hex(bytes);
      switch (below(rng_, 6)) {
      case 0:
        total = pick(rng_,
                     std::vector<int64_t>{0, -1, total - 1, total + 1, INT64_MAX, int64_t(rng_())});
        break;
      case 1:
        digest = chance(rng_, 50) ? fuzzText(rng_) : sha256Hex(bytes + "x");
        break;
      default:
        break;
      }
      size_t chunk = 1 + below(rng_, chance(rng_, 50) ? 64 : 70000);
      std::string auth = fuzzAuthorization(true);
      v1::ImportResponse resp;
      grpc::Status s = importChunks(auth, bytes, chunk, total, digest, resp);
      expectIn("Import of " + std::to_string(bytes.size()) + " bytes in chunks of " +
                   std::to_string(chunk) + " (" + printableOf(auth) + ")",
               s, expectedForWrite(auth, {StatusCode::OK, StatusCode::INVALID_ARGUMENT}));
      if (s.ok()) {
        ++imports_;
        EXPECT_EQ(resp.rows(), 0) << "an import of what the server has wrote rows";
      }
      return;
    }
    case 6: {
      v1::ListRequest r;
      r.set_limit(pick(rng_, std::vector<int32_t>{0, 1, -1, 10000, 10001, INT32_MAX, INT32_MIN,
                                                  int32_t(rng_())}));
      v1::ListResponse resp;
      expectIn("List " + std::to_string(r.limit()), stub_->List(context().get(), r, &resp),
               {StatusCode::OK, StatusCode::INVALID_ARGUMENT});
      return;
    }
    case 7: {
      v1::StatsResponse resp;
      expectIn("Stats", stub_->Stats(context().get(), v1::StatsRequest(), &resp), {StatusCode::OK});
      return;
    }
    default: {
      auto ctx = context();
      auto reader = stub_->Export(ctx.get(), v1::ExportRequest());
      v1::ExportChunk c;
      while (reader->Read(&c)) {
      }
      expectIn("Export", reader->Finish(), {StatusCode::OK});
      return;
    }
    }
  }

  /// One frame that is not (or not quite) a request, on a random method.
  void raw(const std::string &image) {
    static const std::vector<std::string> methods = {"Lookup",
                                                     "GetKernel",
                                                     "AcquireTuningLease",
                                                     "ReleaseTuningLease",
                                                     "PublishResult",
                                                     "Tune",
                                                     "List",
                                                     "Explain",
                                                     "Stats",
                                                     "Export",
                                                     "Import"};
    std::string method = pick(rng_, methods);
    std::string bytes;
    switch (below(rng_, 5)) {
    case 0:
      bytes = randomBytes(rng_, below(rng_, 300));
      break;
    case 1:
    case 2: {
      // A real request's serialization, cut short or with bytes changed.
      std::string whole;
      if (chance(rng_, 50))
        fuzzKernelRequest(rng_).SerializeToString(&whole);
      else
        fuzzPublish(rng_).SerializeToString(&whole);
      if (whole.empty())
        whole = "\x0a\x01x";
      if (chance(rng_, 50)) {
        bytes = whole.substr(0, below(rng_, whole.size()));
      } else {
        bytes = whole;
        for (size_t i = 0, n = 1 + below(rng_, 4); i < n; ++i)
          bytes[below(rng_, bytes.size())] = char(rng_());
      }
      break;
    }
    case 3: {
      v1::ImportChunk r;
      r.set_data(image);
      r.set_total_bytes(int64_t(image.size()));
      r.set_sha256(sha256Hex(image));
      r.SerializeToString(&bytes);
      bytes.resize(below(rng_, bytes.size()));
      break;
    }
    default:
      // Over the cap: refused unread.
      bytes = randomBytes(rng_, size_t(kMaxMessage) + 1 + below(rng_, 1000));
      break;
    }
    // Never the read-write token: a damaged import can hold a valid row.
    std::string auth = fuzzAuthorization(false);
    auto ctx = context(auth);
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::CompletionQueue cq;
    auto call = generic_->PrepareUnaryCall(ctx.get(), "/tilejit.v1.TileJit/" + method, req, &cq);
    call->StartCall();
    grpc::Status s;
    call->Finish(&resp, &s, reinterpret_cast<void *>(1));
    void *tag;
    bool ok;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    std::vector<StatusCode> codes = {StatusCode::OK,
                                     StatusCode::INVALID_ARGUMENT,
                                     StatusCode::FAILED_PRECONDITION,
                                     StatusCode::UNAUTHENTICATED,
                                     StatusCode::PERMISSION_DENIED,
                                     StatusCode::RESOURCE_EXHAUSTED,
                                     StatusCode::INTERNAL};
    expectIn("raw " + method + " frame of " + std::to_string(bytes.size()) + " bytes", s, codes);
    // An OK write would have written: the read-write token never travels.
    if ((method == "AcquireTuningLease" || method == "ReleaseTuningLease" ||
         method == "PublishResult" || method == "Tune" || method == "Import") &&
        s.ok())
      ADD_FAILURE() << "raw " << method << " without a read-write token was accepted";
  }

  int calls() const { return calls_; }
  /// Valid requests of kernels the store lacked, which a GetKernel compiles.
  const std::vector<v1::KernelRequest> &toCompile() const { return toCompile_; }
  /// Imports the server took (of rows it had already).
  int imports() const { return imports_; }
  std::map<StatusCode, int> &seen() { return seen_; }

private:
  static std::string printableOf(const std::string &s) {
    std::string out;
    for (char c : s.substr(0, 120))
      out += (c >= 0x20 && c < 0x7f) ? c : '?';
    return s.size() > 120 ? out + "...(" + std::to_string(s.size()) + " bytes)" : out;
  }

  static std::vector<StatusCode> expectedForWrite(const std::string &auth,
                                                  std::vector<StatusCode> withToken) {
    if (auth == "Bearer " + std::string(kReadWrite))
      return withToken;
    if (auth == "Bearer " + std::string(kReadOnly))
      return {StatusCode::PERMISSION_DENIED};
    return {StatusCode::UNAUTHENTICATED};
  }

  void expectIn(const std::string &what, const grpc::Status &s,
                const std::vector<StatusCode> &codes) {
    ++calls_;
    ++seen_[s.error_code()];
    bool expected = std::find(codes.begin(), codes.end(), s.error_code()) != codes.end();
    // Oversized requests are refused whatever they are.
    expected |= s.error_code() == StatusCode::RESOURCE_EXHAUSTED;
    EXPECT_TRUE(expected) << what << ": code " << s.error_code() << ": " << s.error_message();
  }

  tilejit::testing::TempDir dir_;
  Rng rng_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TileJit::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  std::string storedConfig_;
  std::vector<v1::KernelRequest> toCompile_;
  int calls_ = 0;
  int imports_ = 0;
  std::map<StatusCode, int> seen_;
};

/// Sends `bytes` on a new TCP connection to `port`, closes the sending side,
/// and says whether the server closed the connection within `deadline`
/// (rather than holding it open, or never accepting it).
bool serverCloses(int port, const std::string &bytes, std::chrono::seconds deadline,
                  std::string &why) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    why = "socket: " + std::string(std::strerror(errno));
    return false;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{long(deadline.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  bool closed = false;
  if (::connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0) {
    why = "connect: " + std::string(std::strerror(errno));
  } else {
    // The server may close before reading everything: a failed send is
    // an answer too.
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_WR);
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0)
        continue;
      closed = n == 0 || errno == ECONNRESET;
      if (!closed)
        why = "recv: " + std::string(std::strerror(errno));
      break;
    }
  }
  ::close(fd);
  return closed;
}

std::string listing(v1::TileJit::Stub &stub, grpc::ClientContext *ctx) {
  v1::ListResponse list;
  grpc::Status s = stub.List(ctx, v1::ListRequest(), &list);
  EXPECT_TRUE(s.ok()) << s.error_message();
  std::string text;
  for (const v1::ListEntry &e : list.entries())
    text += e.kind() + " " + e.key() + " " + e.spec() + " [" + e.config() + "] " + e.arch() + " " +
            std::to_string(e.bytes()) + " " + std::to_string(e.created_at()) + "\n";
  return text;
}

} // namespace

TEST(Server, HostileRequestsAreAnsweredAndChangeNothing) {
  uint64_t seed = tilejit::testing::testSeed();
  SCOPED_TRACE(tilejit::testing::replayHint(seed));
  Hostile h(seed);
  ASSERT_TRUE(h.ready());

  // The store holds a kernel and its published winner before the fuzz, so
  // that an overwrite shows as well as an addition.
  v1::KernelRequest stored;
  stored.set_spec(kStoredSpec);
  v1::GetKernelResponse kernel;
  {
    auto ctx = h.context();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = h.stub().GetKernel(ctx.get(), stored, &kernel);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  v1::AcquireTuningLeaseRequest acquire;
  acquire.set_spec(kStoredSpec);
  acquire.set_holder("setup");
  acquire.set_ttl_ms(60000);
  v1::AcquireTuningLeaseResponse lease;
  ASSERT_TRUE(
      h.stub()
          .AcquireTuningLease(h.context("Bearer " + std::string(kReadWrite)).get(), acquire, &lease)
          .ok());
  ASSERT_TRUE(lease.granted());
  v1::PublishResultRequest publish;
  publish.set_lease_id(lease.lease_id());
  publish.set_spec(kStoredSpec);
  publish.set_winner_config(kernel.kernel().config());
  publish.set_winner_ms(0.01);
  v1::PublishResultResponse published;
  grpc::Status ps = h.stub().PublishResult(h.context("Bearer " + std::string(kReadWrite)).get(),
                                           publish, &published);
  ASSERT_TRUE(ps.ok()) << ps.error_message();
  ASSERT_EQ(published.kernel_key(), kernel.kernel().key());
  h.setStoredConfig(kernel.kernel().config());

  std::string before = h.exported();
  ASSERT_FALSE(before.empty());
  // The server's own image imported as it is: accepted, and no row written
  // (so the success path is taken whatever the seed; a seed whose fuzzed
  // imports all failed their checks took none).
  {
    v1::ImportResponse resp;
    grpc::Status s = h.importChunks("Bearer " + std::string(kReadWrite), before, 65536,
                                    int64_t(before.size()), sha256Hex(before), resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.rows(), 0) << "an import of what the server has wrote rows";
  }
  v1::StatsResponse afterExactImport;
  ASSERT_TRUE(h.stub().Stats(h.context().get(), v1::StatsRequest(), &afterExactImport).ok());
  ASSERT_EQ(afterExactImport.imports(), 1u);
  std::string listBefore = listing(h.stub(), h.context().get());
  v1::StatsResponse statsBefore;
  ASSERT_TRUE(h.stub().Stats(h.context().get(), v1::StatsRequest(), &statsBefore).ok());

  constexpr int kRequests = 1200;
  Rng pickKind(seed ^ 0x5bd1e995);
  auto t0 = std::chrono::steady_clock::now();
  while (h.calls() < kRequests && !::testing::Test::HasFailure()) {
    if (pickKind() % 4 == 0)
      h.raw(before);
    else
      h.structured(before);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string codes;
  for (auto [code, n] : h.seen())
    codes += " " + std::to_string(int(code)) + ":" + std::to_string(n);
  std::printf("%d hostile requests in %.1f s; codes seen:%s\n", h.calls(), seconds, codes.c_str());
  ASSERT_GE(h.calls(), kRequests) << "stopped at the first failure";
  // A run that never got past the parser tests little.
  EXPECT_GT(h.seen()[StatusCode::OK], kRequests / 20);
  EXPECT_GT(h.seen()[StatusCode::INVALID_ARGUMENT], kRequests / 5);
  EXPECT_GT(h.seen()[StatusCode::FAILED_PRECONDITION], 0) << "no publish got as far as its lease";
  // (Fuzzed imports that pass their checks are counted, if any: not every
  // seed has one.)

  // Nothing was compiled, published or imported: the store is as it was.
  v1::StatsResponse statsAfter;
  ASSERT_TRUE(h.stub().Stats(h.context().get(), v1::StatsRequest(), &statsAfter).ok());
  EXPECT_EQ(statsAfter.compiles(), statsBefore.compiles());
  EXPECT_EQ(statsAfter.publishes(), statsBefore.publishes());
  EXPECT_EQ(statsAfter.imports(), statsBefore.imports() + uint64_t(h.imports()));
  EXPECT_EQ(listing(h.stub(), h.context().get()), listBefore);
  EXPECT_TRUE(h.exported() == before) << "the store's rows changed";

  // Valid fuzzed specs the store lacked: GetKernel compiles each (a compile
  // may also fail, said so), and only those kernels are new in the store.
  std::set<std::string> compiled;
  for (const v1::KernelRequest &r : h.toCompile()) {
    auto ctx = h.context();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    v1::GetKernelResponse got;
    grpc::Status s = h.stub().GetKernel(ctx.get(), r, &got);
    EXPECT_TRUE(s.ok() || s.error_code() == StatusCode::FAILED_PRECONDITION)
        << "GetKernel '" << r.spec() << "' [" << r.config() << "]: code " << s.error_code() << ": "
        << s.error_message();
    if (s.ok())
      compiled.insert(got.kernel().key());
    else
      std::printf("not compiled: %s\n", s.error_message().substr(0, 300).c_str());
  }
  std::printf("%zu valid fuzzed kernels asked for, %zu compiled\n", h.toCompile().size(),
              compiled.size());
  v1::ListResponse list;
  ASSERT_TRUE(h.stub().List(h.context().get(), v1::ListRequest(), &list).ok());
  std::set<std::string> kernelsAfter;
  for (const v1::ListEntry &e : list.entries())
    if (e.kind() == "kernel" && e.key() != kernel.kernel().key())
      kernelsAfter.insert(e.key());
  EXPECT_EQ(kernelsAfter, compiled);

  // Connections that never speak HTTP/2, or stop part way through a frame:
  // each is closed by the server, which serves on.
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  Rng wire(seed ^ 0x9e3779b97f4a7c15);
  for (int i = 0; i < 24; ++i) {
    std::string bytes;
    switch (i % 4) {
    case 0:
      bytes = randomBytes(wire, below(wire, 2000));
      break;
    case 1:
      bytes = preface + randomBytes(wire, below(wire, 2000));
      break;
    case 2:
      // A SETTINGS frame whose header promises more than follows.
      bytes = preface + std::string("\x00\x10\x00\x04\x00\x00\x00\x00\x00\x00\x03", 11);
      break;
    default:
      bytes = preface.substr(0, below(wire, preface.size()));
      break;
    }
    std::string why;
    EXPECT_TRUE(serverCloses(h.port(), bytes, std::chrono::seconds(20), why))
        << "connection " << i << " (" << bytes.size() << " bytes): " << why;
  }

  // Still serving, on the same connection: health, and the stored kernel.
  auto health = grpc::health::v1::Health::NewStub(h.channel());
  grpc::health::v1::HealthCheckRequest hreq;
  hreq.set_service("tilejit.v1.TileJit");
  grpc::health::v1::HealthCheckResponse hresp;
  grpc::Status hs = health->Check(h.context().get(), hreq, &hresp);
  ASSERT_TRUE(hs.ok()) << hs.error_message();
  EXPECT_EQ(hresp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  v1::LookupResponse found;
  grpc::Status ls = h.stub().Lookup(h.context().get(), stored, &found);
  ASSERT_TRUE(ls.ok()) << ls.error_message();
  EXPECT_TRUE(found.found());
  EXPECT_TRUE(found.tuned());
  v1::GetKernelResponse again;
  grpc::Status gs = h.stub().GetKernel(h.context().get(), stored, &again);
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  EXPECT_EQ(again.source(), v1::GetKernelResponse::SOURCE_STORE);
  EXPECT_EQ(again.kernel().cubin(), kernel.kernel().cubin());

  auto store = Store::open(h.dir().file("t.db"));
  ASSERT_TRUE(bool(store)) << llvm::toString(store.takeError());
  auto problems = (*store)->verify();
  ASSERT_TRUE(bool(problems)) << llvm::toString(problems.takeError());
  for (const std::string &p : *problems)
    ADD_FAILURE() << "verify: " << p;
}
