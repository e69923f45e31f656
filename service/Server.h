//===- Server.h - the shared tuning-cache server -----------------*- C++ -*-===//
//
// `tilejit serve`: one store for a cluster, served over gRPC
// (proto/tilejit.proto). Lookup reads the store only; GetKernel compiles a
// missing kernel once however many ask for it at the same time, with the
// best config known (the published winner, else the template's default);
// tuning leases let one tuner per tuning key work while the others use the
// best config meanwhile, and its holder hands one back when done; Tune tunes
// on the server's own GPU under the key's lease, streaming each candidate;
// Export and Import move the whole store in chunks. The standard
// grpc.health.v1 service and server reflection come with it. Every request
// is checked before it is acted on and a bad one is answered
// INVALID_ARGUMENT naming the field; writes (leases, results, Tune, Import)
// need a read-write bearer token when the server has tokens, over TLS when
// it has a certificate. No request names a file: the server touches its own
// store only.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "llvm/Support/Error.h"

namespace grpc {
class Server;
}

namespace tilejit {

struct TuneOptions;
class TileJitService;
class MetricsEndpoint;

/// A bearer token the server accepts.
struct AccessToken {
  std::string secret;
  /// Reads only: a write carrying it is refused (PERMISSION_DENIED).
  bool readOnly = false;
};

/// The tokens of a token file (`tilejit serve --token-file`): one per line,
/// the token and then optionally `read-write` (the default) or `read-only`;
/// blank lines and lines starting with `#` are skipped. A token is printable
/// ASCII without spaces. An error names `path` and the line.
llvm::Expected<std::vector<AccessToken>> parseTokenFile(const std::string &text,
                                                        const std::string &path);

struct ServerOptions {
  std::string dbPath; ///< the store file (":memory:" for tests)
  /// Writes (AcquireTuningLease, ReleaseTuningLease, PublishResult, Tune,
  /// Import) need `authorization: Bearer <token>` with a read-write token of
  /// these; none: no token needed. Reads need none.
  std::vector<AccessToken> tokens;
  /// TLS, as PEM text: the server's certificate chain and private key
  /// (empty: plaintext); with `tlsClientCa` too, every client must present a
  /// certificate that CA signed.
  std::string tlsCert, tlsKey, tlsClientCa;
  /// The longest lease a tuner may ask for.
  std::chrono::milliseconds maxLeaseTtl = std::chrono::minutes(30);
  /// Requests larger than this are refused (RESOURCE_EXHAUSTED) unread.
  int maxMessageBytes = 64 << 20;
  /// The most entries List returns.
  int listCap = 10000;
  /// Where to serve Prometheus's `/metrics` and the status page `/status`
  /// (host:port, plain HTTP, no token: both are for reading); "" : nowhere.
  std::string metricsAddress;
  /// One line per compile, lease and publish; null: stderr.
  std::function<void(const std::string &)> log;
  /// How Tune measures on this host. Null: GPU 0 of the CUDA driver, each
  /// candidate in a `tilejit-worker` process (found as `tilejit tune` finds
  /// it); without a driver or GPU, Tune is refused FAILED_PRECONDITION. Set,
  /// it fills in a tuning's device, worker and compile hook (TuneOptions's
  /// deviceInfo, worker, compile; what it points to outlives the server), or
  /// says why this host cannot tune: the tests tune on a fake worker so.
  std::function<llvm::Error(TuneOptions &)> tuneSetup;
  /// Export sends the store in chunks of this many bytes.
  size_t chunkBytes = 1 << 20;
  /// The largest store image Import takes (its chunks together).
  int64_t maxImportBytes = int64_t(1) << 30;
  /// Imports served at once (each may hold up to maxImportBytes in memory);
  /// one more is refused RESOURCE_EXHAUSTED, unread.
  int maxConcurrentImports = 2;
};

class Server {
public:
  /// Opens the store and listens on `address` ("host:port"; port 0 picks a
  /// free one, see port()).
  static llvm::Expected<std::unique_ptr<Server>> start(ServerOptions options,
                                                       const std::string &address);
  /// Drains with no grace if drain() was not called.
  ~Server();

  int port() const { return port_; }
  /// The port of `/metrics`, or 0 without it.
  int metricsPort() const;
  /// One line, set when the store file was found corrupt and moved aside.
  const std::string &storeNotice() const;
  /// Imports being received now (each holds one of maxConcurrentImports).
  int importsInFlight() const;

  /// Health turns NOT_SERVING, new calls are still answered for `grace` (so
  /// that balancers see the status and stop sending), then the server stops
  /// taking calls and waits up to `deadline` for those in flight to finish
  /// (later it cancels them). Returns when the server has stopped.
  void drain(std::chrono::milliseconds grace, std::chrono::milliseconds deadline);
  /// Blocks until the server has stopped (after drain() on another thread).
  void wait();

private:
  Server();
  std::unique_ptr<TileJitService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsEndpoint> metrics_;
  int port_ = 0;
  std::once_flag drained_;
};

} // namespace tilejit
