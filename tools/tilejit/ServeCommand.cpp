//===- ServeCommand.cpp - `tilejit serve`: the shared tuning-cache server ---===//
#include "tools/tilejit/Commands.h"

#include "core/Settings.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <pthread.h>
#include <sstream>
#include <tuple>

#include "service/Server.h"

namespace tilejit::cli {

namespace {

struct ServeArgs {
  std::string listen = "127.0.0.1:7070";
  std::string db, tokenFile, metricsAddr, tlsCert, tlsKey, tlsClientCa;
  double graceSeconds = 2, drainSeconds = 30;
};

/// The content of the file `flag` names.
llvm::Expected<std::string> readFlagFile(const std::string &flag, const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   flag + ": cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   flag + ": '" + path + "' is empty");
  return ss.str();
}

int serve(const ServeArgs &a) {
  if (a.graceSeconds < 0 || a.drainSeconds < 0)
    return usageError("--drain-grace and --drain-timeout must be >= 0");
  ServerOptions o;
  o.dbPath = settings::storePath(a.db);
  if (!a.tokenFile.empty()) {
    auto text = readFlagFile("--token-file", a.tokenFile);
    if (!text)
      return fail(llvm::toString(text.takeError()));
    auto tokens = parseTokenFile(*text, "--token-file " + a.tokenFile);
    if (!tokens)
      return fail(llvm::toString(tokens.takeError()));
    o.tokens = std::move(*tokens);
  }
  if (a.tlsCert.empty() != a.tlsKey.empty())
    return usageError("--tls-cert and --tls-key go together");
  if (!a.tlsClientCa.empty() && a.tlsCert.empty())
    return usageError("--tls-client-ca needs --tls-cert and --tls-key");
  for (auto [flag, path, out] : {std::tuple{"--tls-cert", &a.tlsCert, &o.tlsCert},
                                 std::tuple{"--tls-key", &a.tlsKey, &o.tlsKey},
                                 std::tuple{"--tls-client-ca", &a.tlsClientCa, &o.tlsClientCa}}) {
    if (path->empty())
      continue;
    auto pem = readFlagFile(flag, *path);
    if (!pem)
      return fail(llvm::toString(pem.takeError()));
    *out = std::move(*pem);
  }
  // SIGTERM and SIGINT are taken by sigwait below, never by a handler:
  // blocked here, before the server's threads start, so that every thread
  // inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  o.metricsAddress = a.metricsAddr;
  std::string db = o.dbPath;
  size_t tokens = o.tokens.size(), readOnly = 0;
  for (const AccessToken &t : o.tokens)
    readOnly += t.readOnly;
  std::string transport = o.tlsCert.empty()       ? "plaintext"
                          : o.tlsClientCa.empty() ? "TLS"
                                                  : "TLS, client certificates required";
  std::string writes = tokens == 0
                           ? "open to every client"
                           : "need a read-write token (" + std::to_string(tokens) + " known, " +
                                 std::to_string(readOnly) + " of them read-only)";
  auto server = Server::start(std::move(o), a.listen);
  if (!server)
    return fail(llvm::toString(server.takeError()));
  if (!(*server)->storeNotice().empty())
    std::fprintf(stderr, "tilejit serve: %s\n", (*server)->storeNotice().c_str());
  std::string host = a.listen.substr(0, a.listen.rfind(':'));
  std::fprintf(stderr, "tilejit serve: listening on %s:%d (%s), store %s, writes %s\n",
               host.c_str(), (*server)->port(), transport.c_str(), db.c_str(), writes.c_str());
  if ((*server)->metricsPort())
    std::fprintf(stderr, "tilejit serve: metrics on http://%s:%d/metrics\n",
                 a.metricsAddr.substr(0, a.metricsAddr.rfind(':')).c_str(),
                 (*server)->metricsPort());
  std::fflush(stderr);
  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "tilejit serve: %s: draining (health NOT_SERVING, calls in flight finish)\n",
               sig == SIGTERM ? "SIGTERM" : "SIGINT");
  std::fflush(stderr);
  auto ms = [](double s) { return std::chrono::milliseconds(int64_t(s * 1000)); };
  (*server)->drain(ms(a.graceSeconds), ms(a.drainSeconds));
  std::fprintf(stderr, "tilejit serve: stopped\n");
  return 0;
}

} // namespace

Action addServe(CLI::App &app) {
  auto *cmd = app.add_subcommand(
      "serve", "Serve the tuning cache over gRPC: kernels compiled once for every client, one "
               "tuner per tuning key");
  auto a = std::make_shared<ServeArgs>();
  cmd->add_option("--listen", a->listen, "host:port to listen on (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--db", a->db, "the store file (default: the tuning cache, see doctor)");
  cmd->add_option("--token-file", a->tokenFile,
                  "bearer tokens, one a line: TOKEN [read-write|read-only] (# starts a comment); "
                  "writes (PublishResult) need a read-write one");
  cmd->add_option("--tls-cert", a->tlsCert, "the server's certificate chain (PEM): serve TLS");
  cmd->add_option("--tls-key", a->tlsKey, "the private key of --tls-cert (PEM)");
  cmd->add_option("--tls-client-ca", a->tlsClientCa,
                  "a CA (PEM): clients must present a certificate it signed");
  cmd->add_option(
      "--metrics-addr", a->metricsAddr,
      "host:port to serve Prometheus's /metrics and the /status page on (default: none)");
  cmd->add_option("--drain-grace", a->graceSeconds,
                  "seconds health reports NOT_SERVING before the server stops taking calls")
      ->capture_default_str();
  cmd->add_option("--drain-timeout", a->drainSeconds,
                  "seconds calls in flight may take to finish after that")
      ->capture_default_str();
  return [a] { return serve(*a); };
}

} // namespace tilejit::cli
