//===- main.cpp - the tilejit command-line tool -----------------------------===//
#include "tools/tilejit/Commands.h"

#include "core/Settings.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <utility>
#include <vector>

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

} // namespace tilejit::cli

namespace {
/// The variables that flags given to `cmd` (or a subcommand of it it ran)
/// stand in for, so that a bad value of them does not stop it.
std::vector<std::string_view> excusedByFlags(const CLI::App *cmd) {
  static const std::pair<const char *, std::string_view> standIns[] = {
      {"--server", "TILEJIT_SERVER"}, {"--db", "TILEJIT_CACHE_DIR"}};
  std::vector<std::string_view> out;
  for (auto [flag, var] : standIns) {
    const CLI::Option *o = cmd->get_option_no_throw(flag);
    if (o && o->count() > 0)
      out.push_back(var);
  }
  for (const CLI::App *sub : cmd->get_subcommands())
    for (std::string_view var : excusedByFlags(sub))
      out.push_back(var);
  return out;
}
} // namespace

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
      // them, the bad one with its error, and then exits 2); not one that a
      // flag given to the command stands in for.
      if (sub->get_name() != "doctor")
        if (auto e = tilejit::settings::checkAll(false, excusedByFlags(sub)))
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
