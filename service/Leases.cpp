//===- Leases.cpp -----------------------------------------------------------===//
#include "service/Leases.h"

#include <random>

namespace tilejit {

std::string LeaseTable::newId() {
  // Not a secret (writes need the bearer token), but not guessable by
  // another tuner either: 128 random bits.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char *hex = "0123456789abcdef";
  std::string id;
  for (int w = 0; w < 2; ++w) {
    uint64_t v = rng();
    for (int i = 0; i < 16; ++i, v >>= 4)
      id += hex[v & 15];
  }
  return id;
}

void LeaseTable::sweep(Clock::time_point now) {
  for (auto it = leases_.begin(); it != leases_.end();)
    if (it->second.expires <= now) {
      ++expired_;
      it = leases_.erase(it);
    } else {
      ++it;
    }
}

LeaseTable::Grant LeaseTable::acquire(const std::string &tuneKey, const std::string &holder,
                                      std::chrono::milliseconds ttl, const std::string &leaseId) {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  sweep(now);
  Grant g;
  auto it = leases_.find(tuneKey);
  if (it != leases_.end() && (leaseId.empty() || it->second.id != leaseId)) {
    g.holder = it->second.holder;
    g.expiresIn = std::chrono::duration_cast<std::chrono::milliseconds>(it->second.expires - now);
    return g;
  }
  if (it == leases_.end())
    it = leases_.emplace(tuneKey, Lease{newId(), holder, now}).first;
  it->second.holder = holder;
  it->second.expires = now + ttl;
  g.granted = true;
  g.leaseId = it->second.id;
  g.holder = holder;
  g.expiresIn = ttl;
  return g;
}

bool LeaseTable::release(const std::string &tuneKey, const std::string &leaseId) {
  std::lock_guard<std::mutex> lock(mu_);
  sweep(Clock::now());
  auto it = leases_.find(tuneKey);
  if (it == leases_.end() || leaseId.empty() || it->second.id != leaseId)
    return false;
  leases_.erase(it);
  return true;
}

std::vector<LeaseTable::Held> LeaseTable::held() {
  std::lock_guard<std::mutex> lock(mu_);
  auto now = Clock::now();
  sweep(now);
  std::vector<Held> out;
  for (auto &[key, l] : leases_)
    out.push_back(
        {key, l.holder, std::chrono::duration_cast<std::chrono::milliseconds>(l.expires - now)});
  return out;
}

uint64_t LeaseTable::expired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return expired_;
}

} // namespace tilejit
