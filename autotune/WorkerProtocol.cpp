//===- WorkerProtocol.cpp -------------------------------------------------===//
#include "autotune/WorkerProtocol.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <poll.h>
#include <sys/socket.h>
#include <vector>

namespace tilejit::worker {

using nlohmann::json;

constexpr uint32_t kMaxMessage = 1u << 30;

namespace {

bool writeAll(int fd, const void *data, size_t n) {
  const char *p = static_cast<const char *>(data);
  while (n > 0) {
    // MSG_NOSIGNAL: a worker that died gives EPIPE here, not a SIGPIPE that
    // would end the tuning process.
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

/// Reads exactly `n` bytes before `deadline` (none when `timed` is false).
Received readAll(int fd, void *data, size_t n, bool timed,
                 std::chrono::steady_clock::time_point deadline) {
  char *p = static_cast<char *>(data);
  while (n > 0) {
    int waitMs = -1;
    if (timed) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline - std::chrono::steady_clock::now())
                      .count();
      if (left <= 0)
        return Received::Timeout;
      waitMs = int(std::min<long long>(left, INT_MAX));
    }
    pollfd pfd{fd, POLLIN, 0};
    int r = ::poll(&pfd, 1, waitMs);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return Received::Broken;
    if (r == 0)
      return Received::Timeout;
    ssize_t got = ::recv(fd, p, n, 0);
    if (got < 0 && errno == EINTR)
      continue;
    if (got == 0)
      return Received::Closed;
    if (got < 0)
      return Received::Broken;
    p += got;
    n -= size_t(got);
  }
  return Received::Message;
}

} // namespace

bool sendMessage(int fd, const json &msg) {
  std::vector<uint8_t> body = json::to_cbor(msg);
  uint32_t n = uint32_t(body.size());
  uint8_t head[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
  return writeAll(fd, head, 4) && writeAll(fd, body.data(), body.size());
}

Received receiveMessage(int fd, double seconds, json &out) {
  bool timed = seconds >= 0;
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(timed ? int64_t(seconds * 1000) : 0);
  uint8_t head[4];
  Received r = readAll(fd, head, 4, timed, deadline);
  if (r != Received::Message)
    return r;
  uint32_t n = uint32_t(head[0]) | uint32_t(head[1]) << 8 | uint32_t(head[2]) << 16 |
               uint32_t(head[3]) << 24;
  if (n > kMaxMessage)
    return Received::Broken;
  std::vector<uint8_t> body(n);
  if ((r = readAll(fd, body.data(), n, timed, deadline)) != Received::Message)
    return r;
  out = json::from_cbor(body, /*strict=*/true, /*allow_exceptions=*/false);
  return out.is_discarded() ? Received::Broken : Received::Message;
}

} // namespace tilejit::worker
