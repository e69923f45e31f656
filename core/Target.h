//===- Target.h - the GPU a kernel is built for -------------------*- C++ -*-===//
//
// One value names the target: the architecture and the multiprocessor count,
// and from them what every layer asks (clusters, the shared memory a block may
// have, the usual multiprocessor count). No layer compares arch strings.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tilejit {

enum class Arch : uint8_t { Sm80, Sm86, Sm89, Sm90, Sm90a };

struct Target {
  Arch arch = Arch::Sm90a;
  /// Multiprocessors when the GPU is not the arch's usual part (usualSMs());
  /// 0 otherwise, so a spec for the usual part has one canonical form.
  int sms = 0;

  /// "sm_90a" -> {Sm90a}; nullopt for an arch tilejit does not build for.
  static std::optional<Target> parse(std::string_view arch, int sms = 0);
  /// The compute capability `major.minor` of a device (9.0 gives sm_90a: wgmma
  /// and setmaxnreg need the "a" target).
  static std::optional<Target> forDevice(int major, int minor, int sms);
  /// "sm_80, sm_86, sm_89, sm_90, sm_90a", for messages.
  static const char *knownArchs();

  std::string_view archName() const;
  /// 80, 86, 89, 90.
  int computeCapability() const;
  /// Thread-block clusters and distributed shared memory (sm_90 and later).
  bool hasClusters() const { return computeCapability() >= 90; }
  /// wgmma, TMA multicast and setmaxnreg: the arch-specific sm_90a target.
  bool hasWgmma() const { return arch == Arch::Sm90a; }
  /// The tensor memory accelerator and mbarrier transaction counts.
  bool hasTma() const { return computeCapability() >= 90; }
  /// The most blocks a portable cluster may have.
  int maxClusterBlocks() const { return hasClusters() ? 8 : 1; }
  /// Shared memory one block may use with the opt-in for dynamic shared
  /// memory (cuFuncSetAttribute); 48 KB without it.
  int64_t maxSharedBytesPerBlock() const;
  static constexpr int64_t kStaticSharedBytes = 48 * 1024;
  /// The multiprocessors of the usual part (H100/H200 SXM 132, A100 108).
  int usualSMs() const;
  /// The multiprocessors kernels are sized for.
  int smCount() const { return sms > 0 ? sms : usualSMs(); }
  /// Targets a GPU of `n` multiprocessors (0 when that is the usual count).
  void setSMs(int n) { sms = n == usualSMs() ? 0 : n; }

  bool operator==(const Target &o) const { return arch == o.arch && sms == o.sms; }
  bool operator!=(const Target &o) const { return !(*this == o); }
};

} // namespace tilejit
