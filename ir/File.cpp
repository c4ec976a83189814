#include "ir/File.h"

#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sgc {
namespace {

/// The error for a path that is not a readable regular file, if it is not one.
std::optional<std::string> notARegularFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return path + ": no such file";
  if (!fs::is_regular_file(path, ec)) return path + ": not a regular file";
  return std::nullopt;
}

} // namespace

Expected<std::string> readWholeFile(const std::string& path) {
  if (auto why = notARegularFile(path)) return makeError(*why);
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream f(path, std::ios::binary);
  if (ec || !f) return makeError(path + ": cannot open");
  std::string bytes(size, '\0');
  f.read(bytes.data(), (std::streamsize)size);
  if ((uint64_t)f.gcount() != size || f.peek() != std::ifstream::traits_type::eof()) return makeError(path + ": cannot read (the file changed while it was read)");
  return bytes;
}

Expected<MappedFile> MappedFile::open(const std::string& path) {
  if (auto why = notARegularFile(path)) return makeError(*why);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (fd >= 0) close(fd);
    return makeError(path + ": cannot open");
  }
  size_t size = (size_t)st.st_size;
  void* at = size ? mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  close(fd); // the mapping keeps the file
  if (at == MAP_FAILED) return makeError(path + ": cannot map into memory");
  return MappedFile((const char*)at, size);
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<char*>(data_), size_);
}

} // namespace sgc
