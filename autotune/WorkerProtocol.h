//===- WorkerProtocol.h - messages between the tuner and its worker -*- C++ -*-===//
//
// Each message is a 4-byte little-endian length and a CBOR map (Worker.h
// lists the messages).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <nlohmann/json.hpp>

namespace tilejit::worker {

/// Sends one message; false when the peer is gone (never raises SIGPIPE).
bool sendMessage(int fd, const nlohmann::json &msg);

enum class Received { Message, Timeout, Closed, Broken };
/// Receives one message, waiting at most `seconds` (< 0: for ever).
Received receiveMessage(int fd, double seconds, nlohmann::json &out);

} // namespace tilejit::worker
