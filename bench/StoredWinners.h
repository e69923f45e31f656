//===- StoredWinners.h - the configs `tilejit tune` stored, for --db -*- C++ -*-===//
//
// gemm_bench and attn_bench run, with --db FILE, the winner tuned for each
// case's spec instead of its default config.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "autotune/Tuner.h"
#include "bench/BenchUtil.h"
#include "compiler/templates/Template.h"
#include "runtime/Store.h"

namespace tilejit::bench {

/// The store --db names, opened for reading: a path with no store there is
/// an error, not a new empty store.
inline std::unique_ptr<Store> openStoredWinners(const std::string &path) {
  std::unique_ptr<Store> store = must(Store::openForReading(path));
  if (!store)
    die("--db " + path + ": no store there");
  return store;
}

/// The winner stored for `spec`, where there is one its template takes (a
/// refused one is said, naming the case, and the default runs instead).
inline std::optional<TileConfig> storedWinner(Store &store, const KernelSpec &spec,
                                              const std::string &caseName) {
  auto w = must(store.winner(tuneKey(spec)));
  if (!w)
    return std::nullopt;
  TileConfig won = must(TileConfig::parse(w->config));
  if (llvm::Error err = getTemplate(spec).checkConfig(spec, won)) {
    std::printf("%-32s stored winner %s refused (%s): the default instead\n", caseName.c_str(),
                w->config.c_str(), llvm::toString(std::move(err)).c_str());
    return std::nullopt;
  }
  return won;
}

} // namespace tilejit::bench
