//===- Output.cpp -----------------------------------------------------------===//
#include "tools/tilejit/Output.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tilejit::cli {

std::string shown(std::string_view text) {
  std::string s;
  s.reserve(text.size());
  for (char c : text) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      s += c;
      continue;
    }
    char buf[5];
    std::snprintf(buf, sizeof buf, "\\x%02x", u);
    s += buf;
  }
  return s;
}

namespace {

/// Writes all of `bytes` to `fd`; 0 or the errno of the write that failed.
int writeAll(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return n < 0 ? errno : EIO;
    done += size_t(n);
  }
  return 0;
}

} // namespace

std::string dumped(const nlohmann::json &j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

llvm::Error writeFileAtomically(const std::string &path, std::string_view bytes) {
  auto error = [&](int err) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot write '" + path + "': " + std::strerror(err));
  };
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    if (S_ISDIR(st.st_mode))
      return error(EISDIR);
    // A device or a FIFO (/dev/null, a pipe) is written as it is.
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return error(errno);
    int err = writeAll(fd, bytes);
    if (::close(fd) != 0 && !err)
      err = errno;
    return err ? error(err) : llvm::Error::success();
  }
  // A symbolic link's target is the file replaced, not the link.
  std::string target = path;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    if (char *real = ::realpath(path.c_str(), nullptr)) {
      target = real;
      std::free(real);
    }
  std::string temp = target + ".tmp-XXXXXX";
  int fd = ::mkstemp(temp.data());
  if (fd < 0)
    return error(errno);
  // mkstemp makes the file 0600; give it what a plain create would.
  mode_t mask = ::umask(0);
  ::umask(mask);
  int err = ::fchmod(fd, 0666 & ~mask) != 0 ? errno : 0;
  if (!err)
    err = writeAll(fd, bytes);
  if (!err && ::fsync(fd) != 0)
    err = errno;
  if (::close(fd) != 0 && !err)
    err = errno;
  if (!err && ::rename(temp.c_str(), target.c_str()) != 0)
    err = errno;
  if (err) {
    ::unlink(temp.c_str());
    return error(err);
  }
  return llvm::Error::success();
}

int finishOutput(int rc) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout))
    return rc;
  int err = errno;
  std::fprintf(stderr, "tilejit: error: writing to standard output failed: %s\n",
               std::strerror(err ? err : EIO));
  return 1;
}

} // namespace tilejit::cli
