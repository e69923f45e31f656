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
#include <memory>
#include <optional>
#include <string>

#include "compiler/Compiler.h"
#include "runtime/Store.h"

namespace tilejit {

class ClientChannel;

struct ClientOptions {
  std::string address; ///< host:port
  std::string token;   ///< sent as `authorization: Bearer <token>` on writes
  /// The most one request may take, retries included.
  std::chrono::milliseconds deadline = std::chrono::seconds(5);
  /// Attempts while the server is UNAVAILABLE; the wait between them
  /// starts at `backoff` and doubles.
  int attempts = 3;
  std::chrono::milliseconds backoff = std::chrono::milliseconds(50);

  /// From TILEJIT_SERVER (host:port), TILEJIT_TOKEN or TILEJIT_TOKEN_FILE
  /// and TILEJIT_SERVER_DEADLINE_MS; nullopt when TILEJIT_SERVER is unset.
  /// A bad value is an error naming the variable.
  static llvm::Expected<std::optional<ClientOptions>> fromEnvironment();
};

/// A kernel as the server sent it.
struct RemoteKernel {
  KernelBinary binary;
  std::string sha256;
  bool tuned = false; ///< the config is a published winner
  std::string source; ///< "store", "compiled" or "shared" (the server's side)
};

class Client {
public:
  explicit Client(ClientOptions options);
  ~Client();

  /// GetKernel: from the server's store, or compiled there. An empty config
  /// asks for the best the server knows.
  llvm::Expected<RemoteKernel> getKernel(const KernelSpec &spec, const TileConfig &config = {},
                                         Backend backend = Backend::Nvptx);
  /// Lookup: the server's store only; nullopt on a miss.
  llvm::Expected<std::optional<RemoteKernel>>
  lookup(const KernelSpec &spec, const TileConfig &config = {}, Backend backend = Backend::Nvptx);

  const ClientOptions &options() const { return options_; }

private:
  ClientOptions options_;
  std::unique_ptr<ClientChannel> channel_;
};

/// Where fetchOrCompile found a kernel.
enum class KernelSource { Store, Server, Compiled };

/// The binary of (spec, config): from `local` (may be null), else from
/// `remote` (may be null) within its deadline, else compiled here. What came
/// from the server or was compiled is recorded in `local`. A server that
/// failed is not an error: `remoteError` (if non-null) gets why, and the
/// kernel is compiled.
llvm::Expected<KernelBinary> fetchOrCompile(const KernelSpec &spec, const TileConfig &config,
                                            Backend backend, Store *local, Client *remote,
                                            KernelSource *source = nullptr,
                                            std::string *remoteError = nullptr);

} // namespace tilejit
