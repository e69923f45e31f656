//===- SecurityTest.cpp - TLS and read-only tokens on the server -----------===//
//
// Certificates are made for each run with the openssl command (a CA, a
// server certificate for 127.0.0.1 and a client certificate it signed, and a
// second CA that signed nothing the server has); the server listens on
// 127.0.0.1 and the client is tilejit's own.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include "autotune/Tuner.h"
#include "compiler/templates/Template.h"
#include "service/Client.h"
#include "service/Server.h"
#include "tests/support/TempDir.h"
#include "tilejit.grpc.pb.h"

using namespace tilejit;
using tilejit::testing::TempDir;

namespace {

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// PEM files made in `dir` by openssl: ca.pem (and ca.key), server.pem and
/// server.key for 127.0.0.1, client.pem and client.key signed by the CA, and
/// other-ca.pem, a CA that signed none of them.
bool makeCertificates(const TempDir &dir) {
  std::string script = "set -e; cd '" + dir.path() + "'\n" + R"(
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
key ca.key; key other-ca.key; key server.key; key client.key
openssl req -x509 -new -key ca.key -out ca.pem -days 1 -subj /CN=tilejit-test-ca
openssl req -x509 -new -key other-ca.key -out other-ca.pem -days 1 -subj /CN=tilejit-other-ca
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > server.ext
openssl req -new -key server.key -out server.csr -subj /CN=localhost
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -extfile server.ext -out server.pem 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' > client.ext
openssl req -new -key client.key -out client.csr -subj /CN=tilejit-client
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -extfile client.ext -out client.pem 2>/dev/null
)";
  std::ofstream(dir.file("make.sh")) << script;
  return std::system(
             ("sh '" + dir.file("make.sh") + "' > '" + dir.file("make.log") + "' 2>&1").c_str()) ==
         0;
}

struct TlsServer {
  explicit TlsServer(bool clientCertificates = false) {
    ready = makeCertificates(certs);
    if (!ready) {
      ADD_FAILURE() << "openssl failed:\n" << readFile(certs.file("make.log"));
      return;
    }
    ServerOptions o;
    o.dbPath = certs.file("server.db");
    o.log = [](const std::string &) {};
    o.tlsCert = readFile(certs.file("server.pem"));
    o.tlsKey = readFile(certs.file("server.key"));
    if (clientCertificates)
      o.tlsClientCa = readFile(certs.file("ca.pem"));
    auto s = Server::start(std::move(o), "127.0.0.1:0");
    if (!s) {
      ADD_FAILURE() << llvm::toString(s.takeError());
      ready = false;
      return;
    }
    server = std::move(*s);
  }
  ClientOptions client(const std::string &ca = "") const {
    ClientOptions o;
    o.address = "127.0.0.1:" + std::to_string(server->port());
    o.deadline = std::chrono::seconds(10);
    o.attempts = 1;
    if (!ca.empty())
      o.caPem = readFile(certs.file(ca));
    return o;
  }
  TempDir certs;
  bool ready = false;
  std::unique_ptr<Server> server;
};

KernelSpec specOf(const std::string &text) {
  auto s = KernelSpec::parse(text);
  EXPECT_TRUE(bool(s)) << (s ? "" : llvm::toString(s.takeError()));
  return s ? *s : KernelSpec();
}

/// What a Lookup by `client` ends with: "" when answered, else the error.
std::string lookupError(const ClientOptions &o) {
  Client client(o);
  auto r = client.lookup(specOf("rmsnorm_fwd rows=16 cols=4096"));
  return r ? "" : llvm::toString(r.takeError());
}

} // namespace

TEST(Tls, OnlyAClientWithTheCaIsAnswered) {
  TlsServer srv;
  ASSERT_TRUE(srv.ready);
  EXPECT_EQ(lookupError(srv.client("ca.pem")), "");
  // Plaintext to a TLS port, and TLS trusting another CA: both refused.
  std::string plain = lookupError(srv.client());
  EXPECT_NE(plain.find(": 14 "), std::string::npos) << plain; // UNAVAILABLE
  std::string otherCa = lookupError(srv.client("other-ca.pem"));
  EXPECT_NE(otherCa.find(": 14 "), std::string::npos) << otherCa;
  // The CA from the environment, as every process reads it.
  ::setenv("TILEJIT_SERVER", srv.client().address.c_str(), 1);
  ::setenv("TILEJIT_CA", srv.certs.file("ca.pem").c_str(), 1);
  auto fromEnv = ClientOptions::fromEnvironment();
  ::unsetenv("TILEJIT_SERVER");
  ::unsetenv("TILEJIT_CA");
  ASSERT_TRUE(fromEnv && *fromEnv) << (fromEnv ? "unset" : llvm::toString(fromEnv.takeError()));
  (*fromEnv)->deadline = std::chrono::seconds(10);
  EXPECT_EQ(lookupError(**fromEnv), "");
}

TEST(Tls, ClientCertificatesWhenTheServerRequiresThem) {
  TlsServer srv(/*clientCertificates=*/true);
  ASSERT_TRUE(srv.ready);
  std::string without = lookupError(srv.client("ca.pem"));
  EXPECT_NE(without.find(": 14 "), std::string::npos) << without;
  ClientOptions with = srv.client("ca.pem");
  with.certPem = readFile(srv.certs.file("client.pem"));
  with.keyPem = readFile(srv.certs.file("client.key"));
  EXPECT_EQ(lookupError(with), "");
}

TEST(Tls, BadSettingsAreRefusedNamingThem) {
  TempDir dir;
  ServerOptions o;
  o.dbPath = ":memory:";
  o.tlsCert = "-----BEGIN CERTIFICATE-----\n";
  auto s = Server::start(o, "127.0.0.1:0");
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("certificate and its private key"),
            std::string::npos);
  o.tlsKey = "not a key";
  s = Server::start(o, "127.0.0.1:0");
  ASSERT_FALSE(bool(s));
  EXPECT_NE(llvm::toString(s.takeError()).find("not valid PEM"), std::string::npos);

  std::ofstream(dir.file("not.pem")) << "hello\n";
  auto with = [&](const char *var, const std::string &value) {
    ::setenv("TILEJIT_SERVER", "h:1", 1);
    ::setenv(var, value.c_str(), 1);
    auto r = ClientOptions::fromEnvironment();
    ::unsetenv(var);
    ::unsetenv("TILEJIT_SERVER");
    return r ? std::string("accepted") : llvm::toString(r.takeError());
  };
  EXPECT_EQ(with("TILEJIT_CA", dir.file("none.pem")),
            "TILEJIT_CA='" + dir.file("none.pem") + "' cannot be read");
  EXPECT_EQ(with("TILEJIT_CA", dir.file("not.pem")),
            "TILEJIT_CA='" + dir.file("not.pem") + "' is not PEM (no -----BEGIN line)");
  EXPECT_EQ(with("TILEJIT_CLIENT_CERT", dir.file("not.pem")),
            "TILEJIT_CLIENT_CERT='" + dir.file("not.pem") + "' is not PEM (no -----BEGIN line)");
}

TEST(Tokens, TheTokenFileFormat) {
  auto tokens = parseTokenFile("# the cluster's tokens\n"
                               "writer-1\n"
                               "  writer-2   read-write\r\n"
                               "\n"
                               "reader-1 read-only\n",
                               "tokens.txt");
  ASSERT_TRUE(bool(tokens)) << llvm::toString(tokens.takeError());
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].secret, "writer-1");
  EXPECT_FALSE((*tokens)[0].readOnly);
  EXPECT_EQ((*tokens)[1].secret, "writer-2");
  EXPECT_FALSE((*tokens)[1].readOnly);
  EXPECT_EQ((*tokens)[2].secret, "reader-1");
  EXPECT_TRUE((*tokens)[2].readOnly);
  auto refusal = [](const std::string &text) {
    auto t = parseTokenFile(text, "tokens.txt");
    return t ? std::string("accepted") : llvm::toString(t.takeError());
  };
  EXPECT_EQ(refusal("a\nb readonly\n"), "tokens.txt:2: 'readonly' is not read-write or read-only");
  EXPECT_EQ(refusal("a read-only extra\n"),
            "tokens.txt:1: more than a token and its access (read-write or read-only)");
  EXPECT_EQ(refusal("# only a comment\n\n"), "tokens.txt: no token in it");
  EXPECT_EQ(refusal("t\xc3\xa9\n"), "tokens.txt:1: a token is printable ASCII without spaces");
}

TEST(Tokens, AReadOnlyTokenReadsButCannotPublish) {
  TempDir dir;
  ServerOptions o;
  o.dbPath = dir.file("t.db");
  o.log = [](const std::string &) {};
  o.tokens = {{"writer", false}, {"reader", true}};
  auto s = Server::start(std::move(o), "127.0.0.1:0");
  ASSERT_TRUE(bool(s)) << llvm::toString(s.takeError());
  std::unique_ptr<Server> server = std::move(*s);
  KernelSpec spec = specOf("rmsnorm_fwd rows=4096 cols=4096");
  TileConfig winner = getTemplate(spec).defaultConfig(spec);
  winner.set("threads", winner.get("threads") == 256 ? 512 : 256);

  ClientOptions ro;
  ro.address = "127.0.0.1:" + std::to_string(server->port());
  ro.token = "reader";
  ClientOptions rw = ro;
  rw.token = "writer";
  Client reader(ro), writer(rw);
  // Reads work with it.
  auto looked = reader.lookup(spec);
  ASSERT_TRUE(bool(looked)) << llvm::toString(looked.takeError());
  // A lease keeps other tuners off a key: a write, refused to a reader.
  auto readerLease =
      reader.acquireLease(spec, Backend::Nvptx, "reader-host", std::chrono::minutes(1));
  ASSERT_FALSE(bool(readerLease));
  std::string leaseMsg = llvm::toString(readerLease.takeError());
  EXPECT_NE(leaseMsg.find(": 7 the bearer token is read-only: AcquireTuningLease writes"),
            std::string::npos)
      << leaseMsg;
  auto lease = writer.acquireLease(spec, Backend::Nvptx, "writer-host", std::chrono::minutes(1));
  ASSERT_TRUE(lease && lease->granted);
  Publication p;
  p.leaseId = lease->id;
  p.spec = spec;
  p.winner = winner;
  p.winnerMs = 0.25;
  auto refused = reader.publish(p);
  ASSERT_FALSE(bool(refused));
  std::string msg = llvm::toString(refused.takeError());
  EXPECT_NE(msg.find(": 7 "), std::string::npos) << msg; // PERMISSION_DENIED
  EXPECT_NE(msg.find("the bearer token is read-only: PublishResult writes and needs a read-write "
                     "token"),
            std::string::npos)
      << msg;
  // Nothing was written; the lease still holds, and a read-write token
  // publishes under it.
  auto tuned = reader.getKernel(spec);
  ASSERT_TRUE(bool(tuned)) << llvm::toString(tuned.takeError());
  EXPECT_FALSE(tuned->tuned);
  auto published = writer.publish(p);
  ASSERT_TRUE(bool(published)) << llvm::toString(published.takeError());
  auto after = reader.getKernel(spec);
  ASSERT_TRUE(bool(after)) << llvm::toString(after.takeError());
  EXPECT_TRUE(after->tuned);
  EXPECT_EQ(after->binary.config, winner);

  auto stub =
      v1::TileJit::NewStub(grpc::CreateChannel(ro.address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  v1::StatsResponse st;
  ASSERT_TRUE(stub->Stats(&ctx, v1::StatsRequest(), &st).ok());
  EXPECT_EQ(st.permission_denied(), 2u);
  EXPECT_EQ(st.unauthenticated(), 0u);
  EXPECT_EQ(st.publishes(), 1u);
}
