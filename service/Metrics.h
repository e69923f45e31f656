//===- Metrics.h - the server's counters for Prometheus -----------*- C++ -*-===//
//
// `/metrics` in Prometheus's text format over plain HTTP (cpp-httplib), on
// an address of its own: names prefixed `tilejit_`, counters ending in
// `_total`, times in `_seconds`, and no shapes or keys as labels (their
// number is unbounded). The status page (service/StatusPage.h) is served
// beside it at `/status`.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "llvm/Support/Error.h"

namespace httplib {
class Server;
}

namespace tilejit {

namespace v1 {
class StatsResponse;
}

/// The exposition text of a server's Stats.
std::string prometheusText(const v1::StatsResponse &stats);

class MetricsEndpoint {
public:
  /// Serves `GET /metrics` on `address` (host:port; port 0 picks a free
  /// one) with the text `render` returns at each request, and `GET /status`
  /// with the HTML `status` returns.
  static llvm::Expected<std::unique_ptr<MetricsEndpoint>>
  start(const std::string &address, std::function<std::string()> render,
        std::function<std::string()> status);
  /// Stops listening and waits for the thread.
  ~MetricsEndpoint();
  int port() const { return port_; }

private:
  MetricsEndpoint();
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
};

} // namespace tilejit
