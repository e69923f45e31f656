//===- server_bench.cpp - the tuning-cache server's throughput on loopback --===//
//
// Starts the server `tilejit serve` runs (Server::start, a store file in a
// fresh directory) on 127.0.0.1, or uses one already running (--server),
// has it compile a handful of RMSNorm kernels (real cubins; no GPU needed),
// then hammers it from many client threads, each with a connection of its
// own and --inflight calls under way on it at any time (the generated async
// stub and a completion queue; 1: one call after the other): Lookup hits
// (the client holding the kernel's cubin, as a client that asks whether its
// kernel is still the best one does: the answer names it without its
// bytes), Lookup hits that carry the cubin, then GetKernel hits, for
// --seconds each after a one-second warm-up. Reports calls per second, p50,
// p99 and the largest latency, and errors (any call that is not an OK hit
// is one), and writes OUT.json and OUT.md.
//
//   server_bench [--threads 8] [--inflight 1] [--seconds 30] [--server HOST:PORT]
//                [--out bench/results/server_throughput]
//
//===----------------------------------------------------------------------===//
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <unistd.h>

#include "ops/rmsnorm/RmsNormDecl.h"
#include "service/Server.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using Clock = std::chrono::steady_clock;

namespace {

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "server_bench: %s\n", msg.c_str());
  std::exit(1);
}

struct Args {
  int threads = 8, inflight = 1;
  double seconds = 30;
  std::string server, out = "bench/results/server_throughput";
};

Args parse(int argc, char **argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc)
      die("missing a value after " + flag);
    std::string v = argv[++i];
    char *end = nullptr;
    if (flag == "--threads") {
      long n = std::strtol(v.c_str(), &end, 10);
      if (*end || n < 1 || n > 1024)
        die("--threads " + v + ": a number in [1, 1024]");
      a.threads = int(n);
    } else if (flag == "--inflight") {
      long n = std::strtol(v.c_str(), &end, 10);
      if (*end || n < 1 || n > 256)
        die("--inflight " + v + ": a number in [1, 256]");
      a.inflight = int(n);
    } else if (flag == "--seconds") {
      double s = std::strtod(v.c_str(), &end);
      if (*end || !(s > 0) || s > 3600)
        die("--seconds " + v + ": a number in (0, 3600]");
      a.seconds = s;
    } else if (flag == "--server") {
      a.server = v;
    } else if (flag == "--out") {
      a.out = v;
    } else {
      die("unknown flag " + flag + " (--threads, --inflight, --seconds, --server, --out)");
    }
  }
  return a;
}

/// The kernels asked for: RMSNorm forward and backward at four widths.
std::vector<std::string> specs() {
  std::vector<std::string> out;
  for (bool backward : {false, true})
    for (int64_t cols : {1024, 2048, 4096, 8192}) {
      rmsnorm::Params p;
      p.backward = backward;
      p.rows = 16384;
      p.cols = cols;
      p.align = alignmentOf({}, p.cols * 2);
      out.push_back(KernelSpec(p).canonical());
    }
  return out;
}

std::unique_ptr<v1::TileJit::Stub> stubFor(const std::string &address, int n) {
  // A channel argument of its own keeps each thread on its own connection,
  // as separate client processes would be.
  grpc::ChannelArguments args;
  args.SetInt("tilejit.bench.connection", n);
  args.SetMaxReceiveMessageSize(64 << 20);
  return v1::TileJit::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

struct Phase {
  std::string name;
  uint64_t calls = 0, errors = 0;
  double seconds = 0, perSecond = 0, p50Ms = 0, p99Ms = 0, maxMs = 0;
  /// CPU time (user + system) of this process, clients and server
  /// together, per call: what the calls cost whatever else the machine ran.
  double cpuUsPerCall = 0;
  std::string firstError;
};

double cpuSeconds() {
  rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::unique_ptr<grpc::ClientContext> context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

/// `threads` threads, each keeping `inflight` calls under way on its own
/// connection for `seconds` after a second of warm-up: `start(stub, ctx,
/// spec, cq)` begins one call (an async reader of Resp), `check(status,
/// resp, spec, why)` says whether it was an OK hit. Latencies of the timed part
/// only.
template <typename Resp, typename Start, typename Check>
Phase run(const std::string &name, const std::string &address, int threads, int inflight,
          double seconds, const std::vector<std::string> &specList, Start start, Check check) {
  std::vector<std::vector<double>> latencies{size_t(threads)};
  std::vector<uint64_t> errors(size_t(threads), 0);
  std::vector<std::string> firstError{size_t(threads)};
  std::atomic<bool> go{false};
  auto warmEnd = Clock::now() + std::chrono::seconds(1);
  auto end =
      warmEnd + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  struct Slot {
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader;
    Resp resp;
    grpc::Status status;
    Clock::time_point t0;
    const std::string *spec = nullptr;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      auto stub = stubFor(address, t);
      grpc::CompletionQueue cq;
      std::vector<Slot> slots(static_cast<size_t>(inflight));
      auto &mine = latencies[size_t(t)];
      mine.reserve(1 << 20);
      uint64_t next = uint64_t(t);
      auto begin = [&](Slot &slot) {
        // The reader lives in the call's memory, which its context owns:
        // gone before the context it came from.
        slot.reader.reset();
        slot.ctx = context();
        slot.resp.Clear();
        slot.t0 = Clock::now();
        slot.spec = &specList[next++ % specList.size()];
        slot.reader = start(*stub, slot.ctx.get(), *slot.spec, &cq);
        slot.reader->Finish(&slot.resp, &slot.status, &slot);
      };
      while (!go.load())
        std::this_thread::yield();
      for (Slot &slot : slots)
        begin(slot);
      size_t pending = slots.size();
      void *tag = nullptr;
      bool ok = false;
      while (pending > 0 && cq.Next(&tag, &ok)) {
        Slot &slot = *static_cast<Slot *>(tag);
        auto t1 = Clock::now();
        std::string why;
        bool hit = ok && check(slot.status, slot.resp, *slot.spec, why);
        if (slot.t0 >= warmEnd && t1 < end) {
          mine.push_back(std::chrono::duration<double, std::milli>(t1 - slot.t0).count());
          if (!hit && errors[size_t(t)]++ == 0)
            firstError[size_t(t)] = ok ? why : "the completion queue failed the call";
        }
        if (t1 < end)
          begin(slot);
        else
          --pending;
      }
      cq.Shutdown();
      while (cq.Next(&tag, &ok)) {
      }
    });
  go = true;
  std::this_thread::sleep_until(warmEnd);
  double cpu0 = cpuSeconds();
  std::this_thread::sleep_until(end);
  double cpu = cpuSeconds() - cpu0;
  for (auto &th : pool)
    th.join();
  Phase p;
  p.name = name;
  std::vector<double> all;
  for (auto &v : latencies)
    all.insert(all.end(), v.begin(), v.end());
  for (size_t t = 0; t < errors.size(); ++t) {
    p.errors += errors[t];
    if (p.firstError.empty())
      p.firstError = firstError[t];
  }
  std::sort(all.begin(), all.end());
  p.calls = all.size();
  p.seconds = seconds;
  p.perSecond = double(all.size()) / seconds;
  p.cpuUsPerCall = all.empty() ? 0 : 1e6 * cpu / double(all.size());
  if (!all.empty()) {
    p.p50Ms = all[all.size() / 2];
    p.p99Ms = all[std::min(all.size() - 1, size_t(double(all.size()) * 0.99))];
    p.maxMs = all.back();
  }
  return p;
}

} // namespace

/// The machine's 1-minute load average: other work on its cores.
double loadAverage() {
  double l = -1;
  if (std::FILE *f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1)
      l = -1;
    std::fclose(f);
  }
  return l;
}

int main(int argc, char **argv) {
  Args a = parse(argc, argv);
  double loadBefore = loadAverage();
  std::unique_ptr<Server> server;
  char dir[] = "/tmp/tilejit-server-bench-XXXXXX";
  std::string address = a.server;
  if (address.empty()) {
    if (!::mkdtemp(dir))
      die(std::string("cannot make a temporary directory: ") + std::strerror(errno));
    ServerOptions o;
    o.dbPath = std::string(dir) + "/server.db";
    o.log = [](const std::string &) {};
    auto s = Server::start(std::move(o), "127.0.0.1:0");
    if (!s)
      die(llvm::toString(s.takeError()));
    server = std::move(*s);
    address = "127.0.0.1:" + std::to_string(server->port());
  }

  // Every kernel in the server's store first: compiled there once.
  std::vector<std::string> specList = specs();
  auto stub = stubFor(address, -1);
  size_t cubinBytes = 0;
  std::map<std::string, std::string> sha256s; // of each spec's cubin, as a client holding it knows
  for (const std::string &spec : specList) {
    v1::KernelRequest req;
    req.set_spec(spec);
    v1::GetKernelResponse resp;
    auto ctx = context();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
    grpc::Status s = stub->GetKernel(ctx.get(), req, &resp);
    if (!s.ok())
      die("GetKernel " + spec + ": " + s.error_message());
    cubinBytes += resp.kernel().cubin().size();
    sha256s[spec] = resp.kernel().sha256();
  }
  std::printf("server %s%s, %zu kernels stored (cubins of %zu bytes on average); %d threads, "
              "%d calls in flight each, %.0f s a phase\n",
              address.c_str(), server ? " (in this process)" : "", specList.size(),
              cubinBytes / specList.size(), a.threads, a.inflight, a.seconds);

  auto request = [](const std::string &spec) {
    v1::KernelRequest req;
    req.set_spec(spec);
    return req;
  };
  auto lookupHit = [](const grpc::Status &s, const v1::LookupResponse &resp, bool held,
                      const std::string &spec, std::string &why) {
    bool hit = s.ok() && resp.found() &&
               (held ? resp.cubin_omitted() && resp.kernel().cubin().empty()
                     : !resp.cubin_omitted() && !resp.kernel().cubin().empty());
    if (!s.ok())
      why = s.error_message();
    else if (!hit)
      why =
          std::string(held ? "not a hit without the cubin: " : "not a hit with the cubin: ") + spec;
    return hit;
  };
  std::vector<Phase> phases;
  for (bool held : {true, false})
    phases.push_back(run<v1::LookupResponse>(
        held ? "Lookup hits (cubin held)" : "Lookup hits (cubin sent)", address, a.threads,
        a.inflight, a.seconds, specList,
        [&, held](v1::TileJit::Stub &st, grpc::ClientContext *ctx, const std::string &spec,
                  grpc::CompletionQueue *cq) {
          v1::KernelRequest req = request(spec);
          if (held)
            req.set_have_sha256(sha256s.at(spec));
          return st.AsyncLookup(ctx, req, cq);
        },
        [&, held](const grpc::Status &s, const v1::LookupResponse &resp, const std::string &spec,
                  std::string &why) { return lookupHit(s, resp, held, spec, why); }));
  phases.push_back(run<v1::GetKernelResponse>(
      "GetKernel hits", address, a.threads, a.inflight, a.seconds, specList,
      [&](v1::TileJit::Stub &st, grpc::ClientContext *ctx, const std::string &spec,
          grpc::CompletionQueue *cq) { return st.AsyncGetKernel(ctx, request(spec), cq); },
      [](const grpc::Status &s, const v1::GetKernelResponse &resp, const std::string &spec,
         std::string &why) {
        bool hit = s.ok() && resp.source() == v1::GetKernelResponse::SOURCE_STORE &&
                   !resp.kernel().cubin().empty();
        if (!s.ok())
          why = s.error_message();
        else if (!hit)
          why = "not a store hit: " + spec;
        return hit;
      }));

  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  nlohmann::json j = {
      {"date", date},
      {"host", host},
      {"cores", std::thread::hardware_concurrency()},
      {"load_average_1min", {{"before", loadBefore}, {"after", loadAverage()}}},
      {"server", server ? "in this process (Server::start, as tilejit serve), 127.0.0.1"
                        : "external " + address},
      {"threads", a.threads},
      {"inflight_per_thread", a.inflight},
      {"seconds_per_phase", a.seconds},
      {"kernels", specList.size()},
      {"cubin_bytes_mean", cubinBytes / specList.size()},
      {"phases", nlohmann::json::array()}};
  std::string md = "| call | calls/s | p50 ms | p99 ms | max ms | CPU us/call | calls | errors |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  bool anyErrors = false;
  for (const Phase &p : phases) {
    anyErrors = anyErrors || p.errors;
    j["phases"].push_back({{"call", p.name},
                           {"calls", p.calls},
                           {"errors", p.errors},
                           {"per_second", p.perSecond},
                           {"p50_ms", p.p50Ms},
                           {"p99_ms", p.p99Ms},
                           {"max_ms", p.maxMs},
                           {"cpu_us_per_call", p.cpuUsPerCall},
                           {"first_error", p.firstError}});
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %.0f | %.3f | %.3f | %.1f | %.0f | %llu | %llu |\n",
                  p.name.c_str(), p.perSecond, p.p50Ms, p.p99Ms, p.maxMs, p.cpuUsPerCall,
                  (unsigned long long)p.calls, (unsigned long long)p.errors);
    md += row;
    if (p.errors)
      std::fprintf(stderr, "server_bench: %s: %llu errors, the first: %s\n", p.name.c_str(),
                   (unsigned long long)p.errors, p.firstError.c_str());
  }
  std::printf("%s", md.c_str());
  std::ofstream(a.out + ".json") << j.dump(2) << "\n";
  std::ofstream(a.out + ".md") << "Server throughput, " << date << ", " << host << " ("
                               << std::thread::hardware_concurrency() << " cores), " << a.threads
                               << " client threads with " << a.inflight << " calls in flight each, "
                               << a.seconds << " s a phase, "
                               << (server ? "server in the same process" : "server " + address)
                               << ", load average " << loadBefore << " before and " << loadAverage()
                               << " after:\n\n"
                               << md;
  if (server) {
    server->drain(std::chrono::milliseconds(0), std::chrono::seconds(5));
    server.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  return anyErrors ? 1 : 0;
}
