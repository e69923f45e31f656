//===- Leases.h - one tuner per tuning key --------------------------*- C++ -*-===//
//
// The right to tune a key, held by one client at a time. A lease lapses when
// its holder does not renew it within its time to live, so a tuner that dies
// frees the key for the next one that asks. In memory: a restarted server
// forgets its leases, and tuners ask again.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tilejit {

class LeaseTable {
public:
  using Clock = std::chrono::steady_clock;

  struct Grant {
    bool granted = false;
    std::string leaseId; ///< when granted
    std::string holder;  ///< the holder now (the caller when granted)
    std::chrono::milliseconds expiresIn{0};
  };
  struct Held {
    std::string tuneKey, holder;
    std::chrono::milliseconds expiresIn{0};
  };

  /// Grants `tuneKey` to `holder` for `ttl` when it is free, lapsed, or held
  /// under `leaseId` (a renewal keeps the id); otherwise says who holds it.
  Grant acquire(const std::string &tuneKey, const std::string &holder,
                std::chrono::milliseconds ttl, const std::string &leaseId);
  /// Ends the lease `leaseId` on `tuneKey`; false when it is not the current
  /// lease (lapsed, taken over, or never granted).
  bool release(const std::string &tuneKey, const std::string &leaseId);
  /// The leases not lapsed, by tuning key.
  std::vector<Held> held();
  /// Leases that lapsed unrenewed and were found so, since the start.
  uint64_t expired() const;

private:
  struct Lease {
    std::string id, holder;
    Clock::time_point expires;
  };
  /// Drops lapsed leases. Callers hold mu_.
  void sweep(Clock::time_point now);
  static std::string newId();

  mutable std::mutex mu_;
  std::unordered_map<std::string, Lease> leases_;
  uint64_t expired_ = 0;
};

} // namespace tilejit
