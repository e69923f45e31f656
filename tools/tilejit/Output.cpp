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

llvm::Error writeFileAtomically(const std::string &path, std::string_view bytes) {
  auto error = [&](const std::string &what, int err) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot write '" + path + "': " + what + std::strerror(err));
  };
  // A device or a FIFO (/dev/null, a pipe) is written as it is; a symbolic
  // link's target is the file replaced.
  std::string target = path;
  struct stat st;
  bool special = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode);
  if (special && S_ISDIR(st.st_mode))
    return error("", EISDIR);
  if (!special && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    if (char *real = ::realpath(path.c_str(), nullptr)) {
      target = real;
      std::free(real);
    }
  std::string temp = special ? path : target + ".tmp-" + std::to_string(::getpid());
  int fd = special ? ::open(path.c_str(), O_WRONLY | O_CLOEXEC)
                   : ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return error("", errno);
  if (special) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        ::close(fd);
        return error("", err);
      }
      done += size_t(n);
    }
    if (::close(fd) != 0)
      return error("", errno);
    return llvm::Error::success();
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(temp.c_str());
      return error("", err);
    }
    done += size_t(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return error("", err);
  }
  if (::rename(temp.c_str(), target.c_str()) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return error("", err);
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
