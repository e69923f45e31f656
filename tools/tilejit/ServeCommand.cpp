//===- ServeCommand.cpp - `tilejit serve`: the shared tuning-cache server ---===//
#include "tools/tilejit/Commands.h"

#include <csignal>
#include <cstdio>
#include <fstream>
#include <pthread.h>
#include <sstream>

#include "service/Server.h"

namespace tilejit::cli {

namespace {

struct ServeArgs {
  std::string listen = "127.0.0.1:7070";
  std::string db, tokenFile, metricsAddr;
  double graceSeconds = 2, drainSeconds = 30;
};

/// The token in `path`: its content without surrounding white space.
llvm::Expected<std::string> readToken(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--token-file: cannot read '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string t = ss.str();
  const char *space = " \t\r\n";
  t.erase(0,
          t.find_first_not_of(space) == std::string::npos ? t.size() : t.find_first_not_of(space));
  t.erase(t.find_last_not_of(space) + 1);
  if (t.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--token-file: '" + path + "' is empty");
  return t;
}

int serve(const ServeArgs &a) {
  if (a.graceSeconds < 0 || a.drainSeconds < 0)
    return usageError("--drain-grace and --drain-timeout must be >= 0");
  ServerOptions o;
  o.dbPath = a.db.empty() ? defaultCachePath() : a.db;
  if (!a.tokenFile.empty()) {
    auto token = readToken(a.tokenFile);
    if (!token)
      return fail(llvm::toString(token.takeError()));
    o.token = *token;
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
  bool token = !o.token.empty();
  auto server = Server::start(std::move(o), a.listen);
  if (!server)
    return fail(llvm::toString(server.takeError()));
  if (!(*server)->storeNotice().empty())
    std::fprintf(stderr, "tilejit serve: %s\n", (*server)->storeNotice().c_str());
  std::string host = a.listen.substr(0, a.listen.rfind(':'));
  std::fprintf(stderr, "tilejit serve: listening on %s:%d, store %s, writes %s\n", host.c_str(),
               (*server)->port(), db.c_str(), token ? "need the token" : "open to every client");
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
                  "a file holding the bearer token that writes (PublishResult) must carry");
  cmd->add_option("--metrics-addr", a->metricsAddr,
                  "host:port to serve Prometheus's /metrics on (default: none)");
  cmd->add_option("--drain-grace", a->graceSeconds,
                  "seconds health reports NOT_SERVING before the server stops taking calls")
      ->capture_default_str();
  cmd->add_option("--drain-timeout", a->drainSeconds,
                  "seconds calls in flight may take to finish after that")
      ->capture_default_str();
  return [a] { return serve(*a); };
}

} // namespace tilejit::cli
