//===- main.cpp - the tilejit command-line tool -----------------------------===//
#include "tools/tilejit/Commands.h"

#include "core/Settings.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "compiler/Compiler.h"
#include "tools/tilejit/Output.h"

namespace tilejit::cli {

namespace {
bool jsonErrors = false;

int reportError(const std::string &msg, int code) {
  std::fprintf(stderr, "tilejit: error: %s\n", msg.c_str());
  if (jsonErrors)
    std::printf("%s\n", dumped(nlohmann::json{{"error", msg}, {"exit", code}}).c_str());
  return code;
}
} // namespace

void setJsonErrors(bool on) { jsonErrors = on; }

int fail(const std::string &msg) { return reportError(msg, 1); }
int usageError(const std::string &msg) { return reportError(msg, 2); }
int noGpu(const std::string &msg) { return reportError(msg, 3); }

std::string defaultCachePath() { return settings::storePath(); }

} // namespace tilejit::cli

int main(int argc, char **argv) {
  CLI::App app{"tilejit: JIT kernel compiler and autotuner for LLM training"};
  app.set_version_flag("--version", std::string("tilejit ") + tilejit::tilejitVersion());
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App *, tilejit::cli::Action>> commands;
  auto add = [&](tilejit::cli::Action (*make)(CLI::App &)) {
    size_t before = app.get_subcommands({}).size();
    auto action = make(app);
    commands.push_back({app.get_subcommands({})[before], action});
  };
  add(tilejit::cli::addDoctor);
  add(tilejit::cli::addCompile);
  add(tilejit::cli::addTune);
  add(tilejit::cli::addExplain);
  add(tilejit::cli::addCache);
  add(tilejit::cli::addServe);
  add(tilejit::cli::addOps);
  for (int i = 1; i < argc && std::string_view(argv[i]) != "--"; ++i)
    if (std::string_view(argv[i]) == "--json")
      tilejit::cli::setJsonErrors(true);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp &e) {
    return tilejit::cli::finishOutput(app.exit(e));
  } catch (const CLI::CallForVersion &e) {
    return tilejit::cli::finishOutput(app.exit(e));
  } catch (const CLI::ParseError &e) {
    return tilejit::cli::usageError(e.what());
  }
  for (auto &[sub, action] : commands)
    if (sub->parsed()) {
      // Every setting checked before any command but doctor (which lists
      // them, the bad one with its error, and then exits 2).
      if (sub->get_name() != "doctor")
        if (auto e = tilejit::settings::checkAll())
          return tilejit::cli::usageError(llvm::toString(std::move(e)));
      // An exception is a defect, but still one line and a status, not an abort.
      try {
        return tilejit::cli::finishOutput(action());
      } catch (const std::exception &e) {
        std::fflush(stdout);
        return tilejit::cli::fail(e.what());
      }
    }
  return tilejit::cli::fail("no command given");
}
