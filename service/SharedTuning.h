//===- SharedTuning.h - one tuning per key across every client ------*- C++ -*-===//
//
// A process that would tune a kernel first asks the server for the key's
// tuning lease. Holding it, the process tunes here (renewing the lease while
// it does) and publishes the winner, its timings and its kernel, so that
// every later client gets the winner from the server without tuning. When
// another process holds it, this one tunes nothing and uses the best config
// the server knows meanwhile. A tuning that fails, or a winner the server
// refuses, hands the lease back (ReleaseTuningLease) so that the next tuner
// need not wait for it to lapse. Leases are writes: the client's token must
// be a read-write one. A server that cannot be asked (or refuses the lease)
// is no reason to stop: the process then tunes alone, as it would without a
// server.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <optional>
#include <string>

#include "autotune/Tuner.h"
#include "service/Client.h"

namespace tilejit {

struct SharedTuning {
  /// The config to use: the winner tuned here, else the server's best.
  TileConfig config;
  /// `config` is a tuned winner (here or published by another).
  bool isWinner = false;
  /// The tuning done here, if any (none when another holds the lease).
  std::optional<TuneResult> tuned;
  /// The lease's holder when it is not this process.
  std::string otherHolder;
  /// The winner reached the server.
  bool published = false;
  /// Why the server took no part (unreachable, refused the result), or "".
  std::string serverProblem;
};

/// The name a process holds leases under: "host:pid".
std::string leaseHolderName();

/// Tunes `spec` under the server's lease (see above). `local` (may be null)
/// receives what tune() records; errors are the tuning's own, never the
/// server's.
llvm::Expected<SharedTuning> tuneShared(const KernelSpec &spec, Store *local, Client &remote,
                                        const TuneOptions &options,
                                        const std::string &holder = leaseHolderName());

} // namespace tilejit
