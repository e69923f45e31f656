//===- TempDir.h - a fresh directory per test, removed after -------*- C++ -*-===//
#pragma once

#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>
#include <string>

namespace tilejit::testing {

/// A new directory under $TMPDIR (else the system's temporary directory),
/// removed with everything in it when this goes out of scope.
class TempDir {
public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tilejit-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()))
      path_ = tmpl;
    else
      ADD_FAILURE() << "cannot make a temporary directory from " << tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty())
      std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;

  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

} // namespace tilejit::testing
