//===- Client.h - the tuning-cache server's client -----------------*- C++ -*-===//
//
// Asks a `tilejit serve` for kernels with a deadline on every call and
// retries (with backoff) while the server is UNAVAILABLE, all within that
// deadline; fetchOrCompile puts the local store before the server and a
// local compile after it, so a process never waits on a server that cannot
// answer in time.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autotune/Tuner.h"
#include "compiler/Compiler.h"
#include "runtime/Store.h"

namespace grpc {
class ClientContext;
}

namespace tilejit {

class ClientChannel;

struct ClientOptions {
  std::string address; ///< host:port
  std::string token;   ///< sent as `authorization: Bearer <token>` on writes
  /// TLS: the CA that signed the server's certificate (PEM text); empty:
  /// plaintext.
  std::string caPem;
  /// A certificate (PEM) and its key for servers that require one (`tilejit
  /// serve --tls-client-ca`); TLS only.
  std::string certPem, keyPem;
  /// The most one request may take, retries included.
  std::chrono::milliseconds deadline = std::chrono::seconds(5);
  /// Attempts while the server is UNAVAILABLE; the wait between them
  /// starts at `backoff` and doubles.
  int attempts = 3;
  std::chrono::milliseconds backoff = std::chrono::milliseconds(50);
  /// After a call finds no server, calls fail at once for this long rather
  /// than wait on it again (0: every call tries).
  std::chrono::milliseconds downFor = std::chrono::seconds(30);
  /// How long a tuning lease lasts unrenewed; a tuner renews it every third
  /// of that while it tunes, so a tuner that dies frees its key this soon.
  std::chrono::milliseconds leaseTtl = std::chrono::seconds(60);
  /// Import sends a store file in chunks of this many bytes (each within
  /// the server's per-message cap).
  size_t chunkBytes = 1 << 20;

  /// From TILEJIT_SERVER (host:port), TILEJIT_TOKEN or TILEJIT_TOKEN_FILE,
  /// TILEJIT_CA (a PEM file: TLS), TILEJIT_CLIENT_CERT and
  /// TILEJIT_CLIENT_KEY (PEM files, together) and TILEJIT_SERVER_DEADLINE_MS;
  /// nullopt when TILEJIT_SERVER is unset. A bad value is an error naming
  /// the variable. `address` (host:port, e.g. from --server) stands in for
  /// TILEJIT_SERVER when given.
  static llvm::Expected<std::optional<ClientOptions>>
  fromEnvironment(const std::string &address = "");
};

/// A kernel as the server sent it.
struct RemoteKernel {
  KernelBinary binary;
  std::string sha256;
  bool tuned = false; ///< the config is a published winner
  std::string source; ///< "store", "compiled" or "shared" (the server's side)
  /// Lookup with the SHA-256 of a cubin the caller holds: this is that
  /// kernel, sent without its cubin and entry points (binary has neither).
  bool codeOmitted = false;
};

/// The server's answer to a request for a tuning lease.
struct TuningLease {
  bool granted = false;
  std::string id;     ///< when granted: what renewals and the result name
  std::string holder; ///< who holds it now (the asker when granted)
  std::string tuneKey;
  std::chrono::milliseconds expiresIn{0};
  /// The config to use meanwhile: the published winner, else the default.
  TileConfig best;
  bool bestIsTuned = false;
};

/// A finished tuning, published under its lease.
struct Publication {
  std::string leaseId;
  KernelSpec spec;
  Backend backend = Backend::Nvptx;
  TileConfig winner;
  double winnerMs = 0;
  std::string reason;
  std::vector<Timing> timings;
  /// The winner's binary, so that later requests need no compile.
  std::optional<StoredKernel> kernel;
};

/// What a tuning on the server's GPU (Client::tune) is asked to do.
struct RemoteTuneOptions {
  Backend backend = Backend::Nvptx;
  /// Named to a second caller of the same key; empty: the server names the
  /// connection.
  std::string holder;
  int maxConfigs = 0;       ///< 0: the whole space
  double budgetSeconds = 0; ///< 0: no limit
  int reps = 0;             ///< timed samples per config; 0: the server's default
  /// The most the whole tuning may take (ClientOptions::deadline is for
  /// single answers).
  std::chrono::milliseconds deadline = std::chrono::hours(24);
};

/// A tuning on the server's GPU, as the server streamed it.
struct RemoteTuning {
  std::string tuneKey, spec, gpu, holder;  ///< from the first message
  std::vector<CandidateResult> candidates; ///< in the order they were decided
  /// From the last message: the winner, now published on the server.
  TileConfig winner;
  double winnerMs = 0, winnerP20Ms = 0, winnerP80Ms = 0;
  int winnerReps = 0;
  std::string reason, kernelKey;
  int measured = 0, reused = 0, failed = 0;
  double wallSeconds = 0;
};

/// What a server knows of one kernel's tuning (Explain).
struct RemoteExplanation {
  std::string tuneKey, toolchain;
  TileConfig config;        ///< what a request gets: the winner, else the default
  bool tuned = false;       ///< config is the published winner
  TileConfig defaultConfig; ///< the template's
  bool stored = false;      ///< config's kernel is in the server's store
  std::optional<Winner> winner;
  std::vector<Timing> timings;
  std::vector<Failure> failures;
  bool truncated = false;
};

/// The server's store listed (List), and its leases.
struct RemoteListing {
  std::vector<Store::Summary> entries;
  bool truncated = false;
  struct Lease {
    std::string tuneKey, holder;
    std::chrono::milliseconds expiresIn{0};
  };
  std::vector<Lease> leases;
};

class Client {
public:
  explicit Client(ClientOptions options);
  ~Client();

  /// GetKernel: from the server's store, or compiled there. An empty config
  /// asks for the best the server knows.
  llvm::Expected<RemoteKernel> getKernel(const KernelSpec &spec, const TileConfig &config = {},
                                         Backend backend = Backend::Nvptx);
  /// Lookup: the server's store only; nullopt on a miss. With `haveSha256`
  /// (the SHA-256 of a cubin the caller holds), a hit on that very kernel
  /// comes without its bytes (RemoteKernel::codeOmitted): whether the
  /// caller's kernel is still the best one costs a small answer.
  llvm::Expected<std::optional<RemoteKernel>> lookup(const KernelSpec &spec,
                                                     const TileConfig &config = {},
                                                     Backend backend = Backend::Nvptx,
                                                     const std::string &haveSha256 = {});

  /// AcquireTuningLease, with the token: the right to tune the key of
  /// `spec` for `ttl`, or a renewal of lease `leaseId`.
  llvm::Expected<TuningLease> acquireLease(const KernelSpec &spec, Backend backend,
                                           const std::string &holder, std::chrono::milliseconds ttl,
                                           const std::string &leaseId = "");
  /// ReleaseTuningLease, with the token: ends lease `leaseId` before it
  /// lapses, so the next tuner need not wait. False when it had already
  /// ended (lapsed, taken over, or its result published).
  llvm::Expected<bool> releaseLease(const KernelSpec &spec, Backend backend,
                                    const std::string &leaseId);
  /// Tune, with the token: tunes `spec` on the server's GPU and publishes
  /// the winner there. `onStarted` sees the first message, `onCandidate`
  /// each candidate's outcome with how many are decided and how many there
  /// are, as the server streams them. An error says why the server did not
  /// tune (FAILED_PRECONDITION: no GPU; ABORTED: another holds the key's
  /// lease, named) or why the tuning failed.
  llvm::Expected<RemoteTuning>
  tune(const KernelSpec &spec, const RemoteTuneOptions &o,
       const std::function<void(const RemoteTuning &)> &onStarted = {},
       const std::function<void(const CandidateResult &, int, int)> &onCandidate = {});
  /// PublishResult, with the token: records the winner (and its timings and
  /// kernel) on the server and ends the lease. Returns the key of the
  /// server's stored kernel of the winner, or "".
  llvm::Expected<std::string> publish(const Publication &p);

  /// List: the server's kernels and winners (at most `limit`, 0: its cap)
  /// and the leases held.
  llvm::Expected<RemoteListing> list(int limit = 0);
  /// Explain: the server's winner, timings and failures of `spec`'s tuning.
  llvm::Expected<RemoteExplanation> explain(const KernelSpec &spec,
                                            Backend backend = Backend::Nvptx);

  /// Export: the server's whole store as the bytes of a store file (what
  /// `tilejit cache export` writes), received in chunks and checked against
  /// the size and SHA-256 the server declared.
  llvm::Expected<std::string> exportStore();
  /// Import, with the token: merges `image`, the bytes of a store file, into
  /// the server's store, all or nothing; sent in chunks of
  /// ClientOptions::chunkBytes with its size and SHA-256.
  llvm::Expected<ImportReport> importStore(const std::string &image);

  const ClientOptions &options() const { return options_; }

private:
  /// Puts the token (if any) on a call: every write carries it.
  void authorize(grpc::ClientContext &ctx) const;

  ClientOptions options_;
  std::unique_ptr<ClientChannel> channel_;
};

/// GetKernel without a config: the best kernel the server knows for `spec`
/// (its published winner, else the template's default), recorded in `local`
/// (may be null) with, for a winner, the winner itself. A kernel made under
/// another build identity (its key is not this process's) is an error.
llvm::Expected<RemoteKernel> fetchBest(const KernelSpec &spec, Backend backend, Store *local,
                                       Client &remote);

/// Where fetchOrCompile found a kernel.
enum class KernelSource { Store, Server, Compiled };

/// The binary of (spec, config): from `local` (may be null), else from
/// `remote` (may be null) within its deadline, else compiled here. What came
/// from the server or was compiled is recorded in `local`. A server that
/// failed is not an error: `remoteError` (if non-null) gets why, and the
/// kernel is compiled. Nor is a local store that cannot be read (locked
/// past its timeout, damaged, gone): `storeError` (if non-null, else
/// stderr) gets why, and the kernel comes from the server or is compiled.
llvm::Expected<KernelBinary> fetchOrCompile(const KernelSpec &spec, const TileConfig &config,
                                            Backend backend, Store *local, Client *remote,
                                            KernelSource *source = nullptr,
                                            std::string *remoteError = nullptr,
                                            std::string *storeError = nullptr);

} // namespace tilejit
