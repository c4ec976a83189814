// Output files (see OutputFile.h).
#include "runtime/OutputFile.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sgc::rt {
namespace {

bool fail(std::string& error, const std::string& msg) {
  error = msg;
  return false;
}

/// Writes all of `size` bytes to `fd`.
bool writeAll(int fd, const void* data, size_t size) {
  const char* p = (const char*)data;
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n, size -= (size_t)n;
  }
  return true;
}

/// Copies the file `from` into the open `fd` (a device or pipe).
bool copyInto(const std::string& from, int fd) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  char buf[1 << 16];
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    if (!writeAll(fd, buf, (size_t)n)) {
      ok = false;
      break;
    }
  }
  ::close(in);
  return ok;
}

bool fsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0 || errno == EINVAL; // some filesystems cannot sync a folder
  ::close(fd);
  return ok;
}

} // namespace

std::string folderOf(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string outputTarget(const std::string& path) {
  std::string p = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return p;
    std::string link(4096, '\0');
    ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n <= 0) return p;
    link.resize((size_t)n);
    p = link[0] == '/' ? link : folderOf(p) + "/" + link;
  }
  return p; // a loop of links: the write fails on it with the system's error
}

std::string temporaryFor(const std::string& path) {
  std::string target = outputTarget(path), suffix = ".tmp." + std::to_string(::getpid());
  struct stat st;
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) { // a device or pipe: not beside it (in /dev)
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/sgc-output" + suffix;
  }
  return target + suffix;
}

bool commitOutput(const std::string& tmp, const std::string& path, std::string& error) {
  std::string target = outputTarget(path);
  struct stat st;
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) { // a device or a pipe: written, not replaced
    if (S_ISDIR(st.st_mode)) {
      std::remove(tmp.c_str());
      return fail(error, path + ": is a directory");
    }
    int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC);
    bool ok = fd >= 0 && copyInto(tmp, fd);
    int saved = errno;
    if (fd >= 0 && ::close(fd) != 0) ok = false;
    std::remove(tmp.c_str());
    return ok || fail(error, path + ": cannot write: " + std::strerror(saved));
  }
  if (!fsyncPath(tmp, O_RDONLY)) {
    std::remove(tmp.c_str());
    return fail(error, path + ": cannot flush " + tmp + " to disk: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), target.c_str()) != 0) {
    int saved = errno;
    std::remove(tmp.c_str());
    return fail(error, path + ": cannot move the new file into place: " + std::strerror(saved));
  }
  if (!fsyncPath(folderOf(target), O_RDONLY | O_DIRECTORY)) return fail(error, path + ": cannot flush its folder to disk");
  return true;
}

bool writeOutput(const std::string& path, const void* data, size_t size, std::string& error) {
  std::string tmp = temporaryFor(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(error, path + ": cannot create " + tmp + ": " + std::strerror(errno));
  bool ok = writeAll(fd, data, size);
  int saved = errno;
  if (::close(fd) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    return fail(error, path + ": write failed: " + std::strerror(saved));
  }
  return commitOutput(tmp, path, error);
}

bool sameFile(const std::string& a, const std::string& b) {
  struct stat x, y;
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

} // namespace sgc::rt
