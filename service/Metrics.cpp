//===- Metrics.cpp ----------------------------------------------------------===//
#include "service/Metrics.h"

#include <httplib.h>

#include "tilejit.pb.h"

namespace tilejit {

namespace {

void metric(std::string &out, const char *name, const char *type, const char *help, double value) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
         name + " ";
  char num[64];
  std::snprintf(num, sizeof num, "%.17g", value);
  out += num;
  out += "\n";
}

} // namespace

std::string prometheusText(const v1::StatsResponse &s) {
  std::string out;
  auto counter = [&](const char *name, const char *help, uint64_t v) {
    metric(out, name, "counter", help, double(v));
  };
  auto gauge = [&](const char *name, const char *help, double v) {
    metric(out, name, "gauge", help, v);
  };
  counter("tilejit_lookups_total", "Lookup calls answered.", s.lookups());
  counter("tilejit_lookup_hits_total", "Lookup calls that found the kernel.", s.lookup_hits());
  counter("tilejit_get_kernel_total", "GetKernel calls answered.", s.get_kernels());
  counter("tilejit_store_hits_total", "GetKernel calls served from the store.", s.store_hits());
  counter("tilejit_compiles_total", "Kernels compiled for GetKernel.", s.compiles());
  counter("tilejit_compile_failures_total", "Compiles that failed.", s.compile_failures());
  counter("tilejit_shared_waits_total",
          "GetKernel calls that waited for a concurrent compile of their key.", s.shared_waits());
  counter("tilejit_leases_granted_total", "Tuning leases granted or renewed.", s.leases_granted());
  counter("tilejit_leases_denied_total", "Tuning lease requests for a key held by another.",
          s.leases_denied());
  counter("tilejit_leases_expired_total", "Tuning leases that lapsed unrenewed.",
          s.leases_expired());
  counter("tilejit_leases_released_total",
          "Tuning leases ended by their holder before they lapsed.", s.leases_released());
  counter("tilejit_publishes_total", "Tuning results recorded.", s.publishes());
  counter("tilejit_tunes_total", "Tunings on the server's GPU that published a winner.", s.tunes());
  counter("tilejit_tune_failures_total",
          "Tunings on the server's GPU that ended without a winner (none passed, cancelled, or the "
          "lease lost).",
          s.tune_failures());
  counter("tilejit_invalid_requests_total", "Requests answered INVALID_ARGUMENT.",
          s.invalid_requests());
  counter("tilejit_unauthenticated_total", "Writes refused for a missing or wrong token.",
          s.unauthenticated());
  counter("tilejit_permission_denied_total", "Writes refused for a read-only token.",
          s.permission_denied());
  counter("tilejit_exports_total", "Copies of the store sent.", s.exports());
  counter("tilejit_imports_total", "Store files merged in.", s.imports());
  gauge("tilejit_active_leases", "Tuning leases held now.", double(s.active_leases()));
  gauge("tilejit_compiles_in_flight", "Compiles running now.", double(s.compiles_in_flight()));
  gauge("tilejit_uptime_seconds", "Seconds since the server started.", s.uptime_seconds());
  return out;
}

MetricsEndpoint::MetricsEndpoint() = default;

llvm::Expected<std::unique_ptr<MetricsEndpoint>>
MetricsEndpoint::start(const std::string &address, std::function<std::string()> render,
                       std::function<std::string()> status) {
  auto colon = address.rfind(':');
  int port = -1;
  if (colon != std::string::npos && colon + 1 < address.size() &&
      address.find_first_not_of("0123456789", colon + 1) == std::string::npos &&
      address.size() - colon - 1 <= 5)
    port = std::stoi(address.substr(colon + 1));
  if (colon == std::string::npos || colon == 0 || port < 0 || port > 65535)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "metrics address '" + address + "' is not host:port");
  std::string host = address.substr(0, colon);
  std::unique_ptr<MetricsEndpoint> m(new MetricsEndpoint());
  m->http_ = std::make_unique<httplib::Server>();
  m->http_->Get("/metrics", [render](const httplib::Request &, httplib::Response &res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  m->http_->Get("/status", [status](const httplib::Request &, httplib::Response &res) {
    res.set_content(status(), "text/html; charset=utf-8");
  });
  if (port == 0)
    m->port_ = m->http_->bind_to_any_port(host);
  else
    m->port_ = m->http_->bind_to_port(host, port) ? port : -1;
  if (m->port_ <= 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot listen for metrics on '" + address + "'");
  httplib::Server *http = m->http_.get();
  m->thread_ = std::thread([http] { http->listen_after_bind(); });
  return m;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (http_)
    http_->stop();
  if (thread_.joinable())
    thread_.join();
}

} // namespace tilejit
