//===- Doctor.cpp - `tilejit doctor`: what this machine has -----------------===//
//
// Versions, GPUs, the store's place (and which setting decided it), the
// tuning worker, and every TILEJIT_* setting with its value and meaning. A
// setting with a bad value is listed with its error, and doctor then exits
// 2, as every other command does before it starts.
//
//===----------------------------------------------------------------------===//
#include "tools/tilejit/Commands.h"

#include <cstdio>
#include <cstdlib>

#include "autotune/Worker.h"
#include "compiler/Compiler.h"
#include "compiler/EmbeddedSources.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "core/Settings.h"
#include "runtime/CudaDriver.h"
#include "runtime/Store.h"
#include "tools/tilejit/Output.h"
#include "llvm/Config/llvm-config.h"

namespace tilejit::cli {

namespace {

/// What doctor reports, gathered once and printed as text or JSON.
nlohmann::json gather(const std::string &dbFlag) {
  nlohmann::json j;
  j["tilejit"] = tilejitVersion();
  j["mlir"] = LLVM_VERSION_STRING;
  j["nvrtc"] = nvrtcVersionString();
  j["ptxas"] = ptxasVersionString();
  j["device_library"] = std::string(embedded::deviceLibraryHash()).substr(0, 16);
  j["compiler"] = std::string(embedded::compilerSourceHash()).substr(0, 16);
  nlohmann::json gpus = nlohmann::json::array();
  if (auto drv = CudaDriver::get(); !drv) {
    j["cuda_driver"] = nullptr;
    j["cuda_driver_error"] = llvm::toString(drv.takeError());
  } else {
    int version = 0, count = 0;
    drv->cuDriverGetVersion(&version);
    drv->cuDeviceGetCount(&count);
    j["cuda_driver"] = std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
    for (int i = 0; i < count; ++i) {
      auto info = queryDevice(i);
      if (!info) {
        gpus.push_back({{"index", i}, {"error", llvm::toString(info.takeError())}});
        continue;
      }
      gpus.push_back({{"index", i},
                      {"name", info->name},
                      {"arch", info->arch()},
                      {"sms", info->smCount},
                      {"memory_bytes", info->totalMemory},
                      {"sm_clock_mhz", info->clockKHz / 1000}});
    }
  }
  j["gpus"] = gpus;

  std::string source;
  std::string cache = settings::storePath(dbFlag, &source);
  FileSystemInfo fsInfo = fileSystemOf(cache);
  std::string journal = settings::value("TILEJIT_STORE_JOURNAL");
  nlohmann::json c = {{"path", cache},
                      {"from", source.empty() ? "the working directory" : source},
                      {"file_system", fsInfo.name},
                      {"network", fsInfo.network}};
  c["journal"] = !journal.empty() && journal != "auto"
                     ? "journal " + journal + " (TILEJIT_STORE_JOURNAL)"
                 : fsInfo.network ? "rollback journal: shared between hosts"
                                  : "WAL journal: shared by the processes of this host";
  // An existing store keeps the mode it was made in (read, never changed here).
  if (auto store = Store::openForReading(cache); !store)
    c["store_error"] = llvm::toString(store.takeError());
  else if (*store)
    c["store"] = {{"schema", (*store)->schemaVersion()}, {"journal_mode", (*store)->journalMode()}};
  else
    c["store"] = nullptr;
  j["cache"] = c;
  auto worker = findWorker();
  j["tune_worker"] = worker ? nlohmann::json(*worker) : nlohmann::json(nullptr);
  if (!worker)
    j["tune_worker_error"] = llvm::toString(worker.takeError());

  nlohmann::json vars = nlohmann::json::array();
  for (const settings::Variable &v : settings::variables()) {
    nlohmann::json e = {{"name", v.name}, {"read_by", v.readBy}, {"meaning", v.meaning}};
    std::string value = settings::value(v.name);
    e["value"] = value.empty() ? nlohmann::json(nullptr) : nlohmann::json(value);
    if (auto err = settings::check(v.name))
      e["error"] = llvm::toString(std::move(err));
    vars.push_back(e);
  }
  j["settings"] = vars;
  return j;
}

void printText(const nlohmann::json &j) {
  auto str = [](const nlohmann::json &v) { return v.get<std::string>(); };
  std::printf("tilejit        %s\n", str(j["tilejit"]).c_str());
  std::printf("MLIR           %s\n", str(j["mlir"]).c_str());
  std::printf("NVRTC          %s\n", str(j["nvrtc"]).c_str());
  std::printf("ptxas          %s (nvJitLink)\n", str(j["ptxas"]).c_str());
  std::printf("device library %s\n", str(j["device_library"]).c_str());
  std::printf("compiler       %s\n", str(j["compiler"]).c_str());
  if (j["cuda_driver"].is_null()) {
    std::printf("CUDA driver    none (%s)\n", str(j["cuda_driver_error"]).c_str());
    std::printf("GPUs           none\n");
  } else {
    std::printf("CUDA driver    %s\n", str(j["cuda_driver"]).c_str());
    std::printf("GPUs           %zu\n", j["gpus"].size());
    for (const auto &g : j["gpus"]) {
      if (g.contains("error")) {
        std::printf("  [%d] error: %s\n", g["index"].get<int>(), str(g["error"]).c_str());
        continue;
      }
      std::printf("  [%d] %s, %s, %d SMs, %.1f GiB, SM clock %d MHz\n", g["index"].get<int>(),
                  str(g["name"]).c_str(), str(g["arch"]).c_str(), g["sms"].get<int>(),
                  double(g["memory_bytes"].get<uint64_t>()) / (1024.0 * 1024 * 1024),
                  g["sm_clock_mhz"].get<int>());
    }
  }
  const auto &c = j["cache"];
  std::printf("cache          %s (from %s)\n               on %s, %s\n", str(c["path"]).c_str(),
              str(c["from"]).c_str(), str(c["file_system"]).c_str(), str(c["journal"]).c_str());
  if (c.contains("store_error"))
    std::printf("               %s\n", shown(str(c["store_error"])).c_str());
  else if (!c["store"].is_null())
    std::printf("               the store: schema %d, %s\n", c["store"]["schema"].get<int>(),
                str(c["store"]["journal_mode"]) == "wal" ? "kept in WAL mode"
                                                         : "kept in rollback-journal mode");
  std::printf("tune worker    %s\n", j["tune_worker"].is_null()
                                         ? str(j["tune_worker_error"]).c_str()
                                         : str(j["tune_worker"]).c_str());
  std::printf("settings       (empty counts as unset)\n");
  for (const auto &v : j["settings"]) {
    std::string value = v["value"].is_null() ? "(unset)" : "'" + shown(str(v["value"])) + "'";
    std::printf("  %-27s %s\n", str(v["name"]).c_str(), value.c_str());
    if (v.contains("error"))
      std::printf("  %-27s ERROR: %s\n", "", shown(str(v["error"])).c_str());
    std::printf("  %-27s %s: %s\n", "", str(v["read_by"]).c_str(), str(v["meaning"]).c_str());
  }
}

} // namespace

Action addDoctor(CLI::App &app) {
  auto *cmd = app.add_subcommand("doctor", "Report versions, GPUs, the cache location and the "
                                           "settings (exit 2 when a setting is bad)");
  auto db = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  cmd->add_option("--db", *db, "Tuning cache file");
  cmd->add_flag("--json", *json, "Print the report as JSON");
  return [db, json] {
    nlohmann::json j = gather(*db);
    // The first bad setting (each was checked once, by gather).
    std::string msg;
    for (const nlohmann::json &v : j["settings"])
      if (v.contains("error")) {
        msg = v["error"].get<std::string>();
        break;
      }
    if (!*json) {
      printText(j);
      return msg.empty() ? 0 : usageError(msg);
    }
    // One JSON document: the report, with the error and status in it.
    int rc = 0;
    if (!msg.empty()) {
      std::fprintf(stderr, "tilejit: error: %s\n", msg.c_str());
      j["error"] = msg;
      j["exit"] = rc = 2;
    }
    std::printf("%s\n", dumped(j).c_str());
    return rc;
  };
}

} // namespace tilejit::cli
