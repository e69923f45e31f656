//===- StatusPage.h - the server's status page in plain HTML ------*- C++ -*-===//
//
// `/status` beside `/metrics`: what a person wants to see of a running
// server (its store, the winners in it, who tunes what now) in one page of
// plain HTML with no scripts, styles from elsewhere or external assets.
// Specs, configs, holders and reasons come from clients, so every piece of
// text is escaped.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/Store.h"
#include "service/Leases.h"

namespace tilejit {

/// `text` with &, <, >, " and ' as HTML character references: safe in an
/// element's text and in a quoted attribute.
std::string htmlEscaped(std::string_view text);

struct ServerStatus {
  std::string version;
  double uptimeSeconds = 0;
  std::string storePath;
  int64_t kernels = 0, winnerCount = 0;
  /// The latest chosen first; at most as many as the page shows.
  std::vector<Winner> winners;
  std::vector<LeaseTable::Held> leases;
};

/// The page, a complete HTML document.
std::string statusPage(const ServerStatus &status);

} // namespace tilejit
