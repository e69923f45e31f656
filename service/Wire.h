//===- Wire.h - tilejit's types to and from the wire --------------*- C++ -*-===//
//
// The one place where messages of proto/tilejit.proto become tilejit's own
// types and back. A conversion from the wire checks what it reads and
// answers INVALID_ARGUMENT naming the field (specs and configs through their
// own parsers, whose errors name the spec field or config key).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <algorithm>
#include <optional>
#include <string>

#include <grpcpp/support/status.h>

#include "compiler/Compiler.h"
#include "runtime/Store.h"
#include "service/Client.h"
#include "tilejit.pb.h"

namespace tilejit::wire {

/// The longest spec or config text accepted.
constexpr size_t kMaxTextBytes = 4096;
/// The longest free-form string (a holder's name, a reason, a GPU name).
constexpr size_t kMaxNameBytes = 256;

/// INVALID_ARGUMENT "<field>: <what>".
grpc::Status invalid(const std::string &field, const std::string &what);

/// INVALID_ARGUMENT naming `field` and the first byte of `text` that is not
/// printable ASCII.
grpc::Status printable(const std::string &text, const std::string &field);
/// Parses and validates spec text. Besides each parameter's own range, the
/// bytes of a 4-byte operand of any two sizes must fit in 64 bits.
grpc::Status specFrom(const std::string &text, const std::string &field, KernelSpec &out);
/// Parses config text; an empty text is an empty config.
grpc::Status configFrom(const std::string &text, const std::string &field, TileConfig &out);
grpc::Status backendFrom(v1::Backend b, const std::string &field, Backend &out);
v1::Backend backendTo(Backend b);

/// A stored kernel as the wire's Kernel; without `withCode`, its identity
/// alone (no cubin, no entry points).
void kernelTo(const StoredKernel &k, Backend backend, v1::Kernel &out, bool withCode = true);
/// The SHA-256 of a stored kernel's cubin, lower-case hex.
std::string sha256Of(const StoredKernel &k);
/// 64 lower-case hex digits.
bool isSha256Hex(const std::string &s);
/// A compiled kernel as the store's record (key and toolchain as given).
StoredKernel storedFrom(const KernelBinary &k, const std::string &ptx,
                        const std::string &toolchain);
/// A kernel a client sent: its entries parse, its SHA-256 matches its cubin,
/// its key is 64 hex digits.
grpc::Status kernelFrom(const v1::Kernel &k, const std::string &field, StoredKernel &out);
/// A kernel the server sent, as a loader's binary (the client side);
/// without `withCode`, one sent without its cubin and entry points (their
/// SHA-256 alone).
llvm::Expected<KernelBinary> binaryFrom(const v1::Kernel &k, bool withCode = true);

grpc::Status timingFrom(const v1::Timing &t, const std::string &field, Timing &out);
void timingTo(const Timing &t, v1::Timing &out);

/// A finished tuning as the PublishResult request that carries it.
void publicationTo(const Publication &p, v1::PublishResultRequest &out);
/// The server's answer to AcquireTuningLease (the client side); its best
/// config must parse.
llvm::Expected<TuningLease> leaseFrom(const v1::AcquireTuningLeaseResponse &r);

/// A store image as the chunks of an Export or Import stream (`Chunk`,
/// v1::ExportChunk or v1::ImportChunk): the first declares the image's size
/// and `sha256`, each carries up to `chunkBytes` of it (an empty image, one
/// empty chunk). `write(chunk)` sends one, false when the stream is closed;
/// false then.
template <typename Chunk, typename Write>
bool writeImageChunks(const std::string &image, const std::string &sha256, size_t chunkBytes,
                      Write write) {
  size_t at = 0;
  do {
    Chunk c;
    if (at == 0) {
      c.set_total_bytes(int64_t(image.size()));
      c.set_sha256(sha256);
    }
    size_t n = std::min(std::max<size_t>(chunkBytes, 1), image.size() - at);
    c.set_data(image.data() + at, n);
    at += n;
    if (!write(c))
      return false;
  } while (at < image.size());
  return true;
}

/// The reading side: an image put together from its chunks, each checked
/// against what the first declared (a size in [1, maxBytes], a SHA-256 of 64
/// lower-case hex digits, not declared again, every later chunk not empty,
/// no byte past the size), and the whole against the declaration at the
/// end. A problem names the chunk's field.
class ImageAssembler {
public:
  struct Problem {
    std::string field, what;
  };
  explicit ImageAssembler(int64_t maxBytes) : maxBytes_(maxBytes) {}
  std::optional<Problem> add(int64_t totalBytes, const std::string &sha256,
                             const std::string &data);
  /// After the last chunk: every declared byte arrived, with the digest.
  std::optional<Problem> finish() const;
  const std::string &image() const { return image_; }
  int64_t chunks() const { return chunks_; }

private:
  int64_t maxBytes_, total_ = 0, chunks_ = 0;
  std::string sha256_, image_;
};

} // namespace tilejit::wire
