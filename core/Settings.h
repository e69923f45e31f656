//===- Settings.h - every TILEJIT_* variable, in one table ---------*- C++ -*-===//
//
// The environment variables tilejit reads, each with who reads it, what it
// means and a check of its value: the CLI, the engine (and so the C
// interface and Python), the client of a tuning-cache server and the store
// read them through this module, `tilejit doctor` lists them, and the
// README's settings table is this table (a test keeps the two alike).
//
// Empty counts as unset. A component checks every variable when it starts
// (checkAll) and refuses to start on a bad value, naming the variable, its
// value and what it takes; it then reads the values it uses once.
//
// The store's place has one rule (storePath): `--db FILE` where a command
// takes one, else $TILEJIT_CACHE_DIR/tilejit.db, else
// $XDG_CACHE_HOME/tilejit/tilejit.db, else ~/.cache/tilejit/tilejit.db.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <string>
#include <string_view>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace tilejit::settings {

struct Variable {
  std::string_view name;
  std::string_view readBy;  // "engine, CLI", "client", "Python", ...
  std::string_view meaning; // what it does and the values it takes
  /// Checks a set value; the message (without the variable's name, which
  /// check() puts first) says what the variable takes. Null: any value.
  llvm::Error (*check)(std::string_view value) = nullptr;
  /// Read by libtilejit or the CLI (checkAll checks these); false for those
  /// only the Python package or the tests read.
  bool native = true;
};

/// Every variable, in the README's order.
llvm::ArrayRef<Variable> variables();
/// The declared variable `name`, or null.
const Variable *find(std::string_view name);

/// The value of `name` in the environment now ("" when unset or empty).
std::string value(std::string_view name);

/// `name`'s value checked: "NAME='value' <what it takes>" when it is bad.
llvm::Error check(std::string_view name);
/// Every set variable that libtilejit or the CLI reads (native) checked;
/// the first bad one is the error. With `everything`, the Python package's
/// and the tests' too (doctor's report). The variables in `excused` are not
/// checked: a command given a flag that stands in for one (--server for
/// TILEJIT_SERVER, --db for TILEJIT_CACHE_DIR) does not read it.
llvm::Error checkAll(bool everything = false, llvm::ArrayRef<std::string_view> excused = {});

/// `value` checked as `name`'s would be (the same message), without
/// reading the environment: a flag that stands in for a variable.
llvm::Error checkValue(std::string_view name, std::string_view value);

/// Where the store is (the rule above); `source` (if not null) gets what
/// decided it: "--db", "TILEJIT_CACHE_DIR", "XDG_CACHE_HOME" or "HOME"
/// ("" for the last resort, tilejit.db in the working directory).
std::string storePath(std::string_view dbFlag = {}, std::string *source = nullptr);

} // namespace tilejit::settings
