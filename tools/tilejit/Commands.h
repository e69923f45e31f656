//===- Commands.h - subcommands of the tilejit CLI ----------------*- C++ -*-===//
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace tilejit::cli {

/// Each subcommand registers itself and returns the action to run when it
/// was chosen; the action returns the process exit code.
using Action = std::function<int()>;
Action addDoctor(CLI::App &app);
Action addCompile(CLI::App &app);
Action addTune(CLI::App &app);
Action addExplain(CLI::App &app);
Action addCache(CLI::App &app);
Action addServe(CLI::App &app);
Action addOps(CLI::App &app);

/// Prints "tilejit: error: <msg>" on stderr and returns 1: the command was
/// understood and could not be done.
int fail(const std::string &msg);
/// The same for a command line that asks for nothing that can be done (an
/// unknown op, dtype, back end or stage, a bad shape or config, flags that
/// do not combine): returns 2, as a parse error does.
int usageError(const std::string &msg);
/// The same for a command that needs a GPU where there is none (no driver,
/// no device): returns 3.
int noGpu(const std::string &msg);
/// With `--json` on the command line, fail, usageError and noGpu also print
/// `{"error": MSG, "exit": CODE}` on standard output, so that a script
/// reading JSON reads the error too.
void setJsonErrors(bool on);

} // namespace tilejit::cli
