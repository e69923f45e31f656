//===- Wire.h - tilejit's types to and from the wire --------------*- C++ -*-===//
//
// The one place where messages of proto/tilejit.proto become tilejit's own
// types and back. A conversion from the wire checks what it reads and
// answers INVALID_ARGUMENT naming the field (specs and configs through their
// own parsers, whose errors name the spec field or config key).
//
//===----------------------------------------------------------------------===//
#pragma once

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

/// A stored kernel as the wire's Kernel.
void kernelTo(const StoredKernel &k, Backend backend, v1::Kernel &out);
/// A compiled kernel as the store's record (key and toolchain as given).
StoredKernel storedFrom(const KernelBinary &k, const std::string &ptx,
                        const std::string &toolchain);
/// A kernel a client sent: its entries parse, its SHA-256 matches its cubin,
/// its key is 64 hex digits.
grpc::Status kernelFrom(const v1::Kernel &k, const std::string &field, StoredKernel &out);
/// A kernel the server sent, as a loader's binary (the client side).
llvm::Expected<KernelBinary> binaryFrom(const v1::Kernel &k);

grpc::Status timingFrom(const v1::Timing &t, const std::string &field, Timing &out);
void timingTo(const Timing &t, v1::Timing &out);

/// A finished tuning as the PublishResult request that carries it.
void publicationTo(const Publication &p, v1::PublishResultRequest &out);
/// The server's answer to AcquireTuningLease (the client side); its best
/// config must parse.
llvm::Expected<TuningLease> leaseFrom(const v1::AcquireTuningLeaseResponse &r);

} // namespace tilejit::wire
