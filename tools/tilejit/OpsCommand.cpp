//===- OpsCommand.cpp - `tilejit ops`: the ops, their parameters and keys ---===//
//
// What a spec (`--set NAME=VALUE`) and a config (`--config`) may say for each
// op: its parameters (kind, range, default, whether given at launch) and
// its template's tunable keys (range, optional). Text or `--json`.
//
//===----------------------------------------------------------------------===//
#include "tools/tilejit/Commands.h"

#include <cstdio>

#include "compiler/templates/Template.h"
#include "core/KernelSpec.h"
#include "tools/tilejit/Output.h"

namespace tilejit::cli {

namespace {

const char *kindName(ParamDecl::Kind k) {
  return k == ParamDecl::Int ? "int" : k == ParamDecl::Bool ? "bool" : "type";
}

nlohmann::json describe(const OpDecl &op) {
  nlohmann::json params = nlohmann::json::array();
  for (const ParamDecl &p : op.params) {
    nlohmann::json j = {{"name", p.name}, {"kind", kindName(p.kind)}, {"doc", p.doc}};
    if (p.kind == ParamDecl::Type) {
      j["default"] = dtypeName(DType(p.defaultValue));
    } else {
      j["default"] = p.defaultValue;
      j["min"] = p.min;
      j["max"] = p.max;
    }
    j["launch_time"] = p.launchTime;
    params.push_back(j);
  }
  nlohmann::json keys = nlohmann::json::array();
  for (const ConfigKeyDecl &k : getTemplate(op).configKeys())
    keys.push_back({{"name", k.name},
                    {"min", k.min},
                    {"max", k.max},
                    {"optional", k.optional},
                    {"doc", k.doc}});
  return {{"op", op.name}, {"doc", op.doc}, {"parameters", params}, {"config_keys", keys}};
}

void printText(const nlohmann::json &op) {
  std::printf("%s: %s\n  parameters (--set NAME=VALUE)\n", op["op"].get<std::string>().c_str(),
              op["doc"].get<std::string>().c_str());
  for (const auto &p : op["parameters"]) {
    std::string range =
        p["kind"] == "int" ? std::to_string(p["min"].get<int64_t>()) + ".." +
                                 std::to_string(p["max"].get<int64_t>()) + ", default " +
                                 std::to_string(p["default"].get<int64_t>())
        : p["kind"] == "bool" ? "0 or 1, default " + std::to_string(p["default"].get<int64_t>())
                              : "bf16, f16 or f32, default " + p["default"].get<std::string>();
    std::printf("    %-10s %-4s %s%s: %s\n", p["name"].get<std::string>().c_str(),
                p["kind"].get<std::string>().c_str(), range.c_str(),
                p["launch_time"].get<bool>() ? ", given at launch" : "",
                p["doc"].get<std::string>().c_str());
  }
  std::printf("  config keys (--config NAME=VALUE ...)\n");
  for (const auto &k : op["config_keys"])
    std::printf("    %-12s %lld..%lld%s: %s\n", k["name"].get<std::string>().c_str(),
                (long long)k["min"].get<int64_t>(), (long long)k["max"].get<int64_t>(),
                k["optional"].get<bool>() ? ", optional" : "", k["doc"].get<std::string>().c_str());
}

} // namespace

Action addOps(CLI::App &app) {
  auto *cmd = app.add_subcommand("ops", "List the ops, their spec parameters and config keys");
  auto name = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("op", *name, "Only this op (" + knownOpNames() + ")");
  cmd->add_flag("--json", *json, "Print the list as JSON");
  return [name, json] {
    nlohmann::json all = nlohmann::json::array();
    for (const OpDecl *op : allOps())
      if (name->empty() || op->name == *name)
        all.push_back(describe(*op));
    if (all.empty())
      return usageError("unknown op '" + *name + "' (known: " + knownOpNames() + ")");
    if (*json) {
      std::printf("%s\n", dumped(all).c_str());
      return 0;
    }
    for (size_t i = 0; i < all.size(); ++i) {
      if (i)
        std::printf("\n");
      printText(all[i]);
    }
    return 0;
  };
}

} // namespace tilejit::cli
