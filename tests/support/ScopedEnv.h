//===- ScopedEnv.h - environment variables for one scope ----------*- C++ -*-===//
#pragma once

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace tilejit::testing {

/// Sets (or, for null, unsets) environment variables for one scope and
/// restores what was there.
class ScopedEnv {
public:
  explicit ScopedEnv(const std::map<std::string, const char *> &values) {
    for (auto &[name, value] : values) {
      const char *old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      if (value)
        ::setenv(name.c_str(), value, 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (auto &[name, value] : saved_)
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  std::map<std::string, std::optional<std::string>> saved_;
};

} // namespace tilejit::testing
