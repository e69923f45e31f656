//===- TestMain.cpp - GoogleTest's main, telling ctest about skips ---------===//
//
// ctest reads only the exit status. A run whose selected tests all skipped
// (the GPU tests on a machine without a GPU) exits with kSkipExitCode, which
// tests/CMakeLists.txt gives ctest as SKIP_RETURN_CODE, after a line with the
// first skip's reason that scripts/test.sh repeats in its summary. A run with
// any failure, or with any test that passed, exits as GoogleTest says.
//
//===----------------------------------------------------------------------===//
#include <cstdio>
#include <gtest/gtest.h>
#include <string>

namespace {

constexpr int kSkipExitCode = 77;

class FirstSkipReason : public ::testing::EmptyTestEventListener {
public:
  void OnTestPartResult(const ::testing::TestPartResult &r) override {
    if (!r.skipped() || !reason.empty())
      return;
    reason = r.message() ? r.message() : "";
    reason = reason.substr(0, reason.find('\n'));
    if (reason.empty())
      reason = "(no reason given)";
  }
  std::string reason;
};

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto *skips = new FirstSkipReason; // owned by GoogleTest's listener list
  ::testing::UnitTest::GetInstance()->listeners().Append(skips);
  int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest &u = *::testing::UnitTest::GetInstance();
  if (rc == 0 && u.test_to_run_count() > 0 && u.skipped_test_count() == u.test_to_run_count()) {
    std::printf("tilejit-tests: all %d test(s) skipped: %s\n", u.skipped_test_count(),
                skips->reason.c_str());
    return kSkipExitCode;
  }
  return rc;
}
