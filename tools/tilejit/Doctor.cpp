//===- Doctor.cpp - `tilejit doctor`: what this machine has -----------------===//
#include "tools/tilejit/Commands.h"

#include <cstdio>
#include <cstdlib>

#include "autotune/Worker.h"
#include "compiler/Compiler.h"
#include "compiler/EmbeddedSources.h"
#include "compiler/Nvrtc.h"
#include "compiler/Ptxas.h"
#include "runtime/CudaDriver.h"
#include "runtime/Store.h"
#include "tools/tilejit/Output.h"
#include "llvm/Config/llvm-config.h"

namespace tilejit::cli {

Action addDoctor(CLI::App &app) {
  auto *cmd = app.add_subcommand("doctor", "Report versions, GPUs and the cache location");
  auto db = std::make_shared<std::string>();
  cmd->add_option("--db", *db, "Tuning cache file");
  return [db] {
    std::printf("tilejit        %s\n", tilejitVersion());
    std::printf("MLIR           %s\n", LLVM_VERSION_STRING);
    std::printf("NVRTC          %s\n", nvrtcVersionString().c_str());
    std::printf("ptxas          %s (nvJitLink)\n", ptxasVersionString().c_str());
    std::printf("device library %.16s\n", std::string(embedded::deviceLibraryHash()).c_str());
    std::printf("compiler       %.16s\n", std::string(embedded::compilerSourceHash()).c_str());
    auto drv = CudaDriver::get();
    if (!drv) {
      std::printf("CUDA driver    none (%s)\n", llvm::toString(drv.takeError()).c_str());
      std::printf("GPUs           none\n");
    } else {
      int version = 0, count = 0;
      drv->cuDriverGetVersion(&version);
      drv->cuDeviceGetCount(&count);
      std::printf("CUDA driver    %d.%d\n", version / 1000, (version % 1000) / 10);
      std::printf("GPUs           %d\n", count);
      for (int i = 0; i < count; ++i) {
        auto info = queryDevice(i);
        if (!info) {
          std::printf("  [%d] error: %s\n", i, llvm::toString(info.takeError()).c_str());
          continue;
        }
        std::printf("  [%d] %s, %s, %d SMs, %.1f GiB, SM clock %d MHz\n", i, info->name.c_str(),
                    info->arch().c_str(), info->smCount,
                    double(info->totalMemory) / (1024.0 * 1024 * 1024), info->clockKHz / 1000);
      }
    }
    std::string cache = db->empty() ? defaultCachePath() : *db;
    FileSystemInfo fsInfo = fileSystemOf(cache);
    const char *journal = std::getenv("TILEJIT_STORE_JOURNAL");
    std::string how = journal && *journal && std::string(journal) != "auto"
                          ? std::string("journal ") + journal + " (TILEJIT_STORE_JOURNAL)"
                      : fsInfo.network ? "rollback journal: shared between hosts"
                                       : "WAL journal: shared by the processes of this host";
    std::printf("cache          %s\n               on %s, %s\n", cache.c_str(), fsInfo.name.c_str(),
                how.c_str());
    // An existing store keeps the mode it was made in (read, never changed here).
    if (auto store = Store::openForReading(cache); !store)
      std::printf("               %s\n", shown(llvm::toString(store.takeError())).c_str());
    else if (*store)
      std::printf("               the store: schema %d, %s\n", (*store)->schemaVersion(),
                  (*store)->journalMode() == "wal" ? "kept in WAL mode"
                                                   : "kept in rollback-journal mode");
    auto worker = findWorker();
    std::printf("tune worker    %s\n",
                worker ? worker->c_str() : llvm::toString(worker.takeError()).c_str());
    return 0;
  };
}

} // namespace tilejit::cli
