//===- StatusPage.cpp -------------------------------------------------------===//
#include "service/StatusPage.h"

#include <cstdio>

namespace tilejit {

std::string htmlEscaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

namespace {

std::string duration(double seconds) {
  char buf[64];
  long long s = (long long)seconds;
  if (s >= 86400)
    std::snprintf(buf, sizeof buf, "%lldd %02lldh %02lldm", s / 86400, s % 86400 / 3600,
                  s % 3600 / 60);
  else if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lldh %02lldm %02llds", s / 3600, s % 3600 / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  return buf;
}

/// A tuning key's spec part ("<spec> | <identity>").
std::string_view specOf(std::string_view tuneKey) {
  size_t bar = tuneKey.find(" | ");
  return bar == std::string_view::npos ? tuneKey : tuneKey.substr(0, bar);
}

std::string cell(std::string_view text) { return "<td>" + htmlEscaped(text) + "</td>"; }

} // namespace

std::string statusPage(const ServerStatus &s) {
  std::string out = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
                    "<title>tilejit serve</title></head><body>\n"
                    "<h1>tilejit serve</h1>\n<p>version " +
                    htmlEscaped(s.version) + ", up " + duration(s.uptimeSeconds) + "</p>\n";
  out += "<h2>Store</h2>\n<p>" + htmlEscaped(s.storePath) + ": " + std::to_string(s.kernels) +
         " kernel(s), " + std::to_string(s.winnerCount) + " winner(s)</p>\n";

  out += "<h2>Winners</h2>\n";
  if (s.winners.empty()) {
    out += "<p>none</p>\n";
  } else {
    out += "<table border=\"1\">\n<tr><th>spec</th><th>config</th><th>median ms</th>"
           "<th>source</th><th>kernel</th><th>build</th></tr>\n";
    for (const Winner &w : s.winners) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.4f", w.medianMs);
      std::string_view spec = specOf(w.tuneKey);
      std::string_view build =
          spec.size() < w.tuneKey.size() ? std::string_view(w.tuneKey).substr(spec.size() + 3) : "";
      out += "<tr>" + cell(spec) + cell(w.config) + cell(ms) + cell(w.reason) +
             cell(w.kernelKey.empty() ? "compiled at first use" : w.kernelKey.substr(0, 16)) +
             cell(build) + "</tr>\n";
    }
    out += "</table>\n";
    if (int64_t(s.winners.size()) < s.winnerCount)
      out += "<p>the latest " + std::to_string(s.winners.size()) + " of " +
             std::to_string(s.winnerCount) + "</p>\n";
  }

  out += "<h2>Tuning leases</h2>\n";
  if (s.leases.empty()) {
    out += "<p>none held</p>\n";
  } else {
    out += "<table border=\"1\">\n<tr><th>spec</th><th>holder</th><th>expires in</th></tr>\n";
    for (const LeaseTable::Held &h : s.leases)
      out += "<tr>" + cell(specOf(h.tuneKey)) + cell(h.holder) +
             cell(duration(double(h.expiresIn.count()) / 1000)) + "</tr>\n";
    out += "</table>\n";
  }
  out += "</body></html>\n";
  return out;
}

} // namespace tilejit
