//===- Target.cpp ---------------------------------------------------------===//
#include "core/Target.h"

namespace tilejit {

namespace {
struct ArchInfo {
  Arch arch;
  std::string_view name;
  int cc;
  int usualSMs;
  int64_t maxShared; // per block, with the dynamic shared memory opt-in
};
constexpr ArchInfo kArchs[] = {
    {Arch::Sm80, "sm_80", 80, 108, 163 * 1024},   {Arch::Sm86, "sm_86", 86, 84, 99 * 1024},
    {Arch::Sm89, "sm_89", 89, 84, 99 * 1024},     {Arch::Sm90, "sm_90", 90, 132, 227 * 1024},
    {Arch::Sm90a, "sm_90a", 90, 132, 227 * 1024},
};
const ArchInfo &info(Arch a) {
  for (const ArchInfo &i : kArchs)
    if (i.arch == a)
      return i;
  return kArchs[0];
}
} // namespace

std::optional<Target> Target::parse(std::string_view arch, int sms) {
  for (const ArchInfo &i : kArchs)
    if (i.name == arch) {
      Target t{i.arch, 0};
      t.setSMs(sms);
      return t;
    }
  return std::nullopt;
}

std::optional<Target> Target::forDevice(int major, int minor, int sms) {
  int cc = major * 10 + minor;
  for (const ArchInfo &i : kArchs)
    if (i.cc == cc) {
      Target t{cc == 90 ? Arch::Sm90a : i.arch, 0};
      t.setSMs(sms);
      return t;
    }
  return std::nullopt;
}

const char *Target::knownArchs() { return "sm_80, sm_86, sm_89, sm_90, sm_90a"; }
std::string_view Target::archName() const { return info(arch).name; }
int Target::computeCapability() const { return info(arch).cc; }
int64_t Target::maxSharedBytesPerBlock() const { return info(arch).maxShared; }
int Target::usualSMs() const { return info(arch).usualSMs; }

} // namespace tilejit
