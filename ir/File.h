// Reading an input file whole (a model, an archive, a tensor): in one read of
// its known size, or mapped into memory, with an error that names the file.
#pragma once
#include "ir/Error.h"

#include <string>

namespace sgc {

/// The bytes of the regular file at `path`; an error names the path and says what failed
/// (absent, not a regular file, unreadable).
Expected<std::string> readWholeFile(const std::string& path);

/// A regular file mapped read-only into memory (a large model read without copying it: the
/// page cache's pages themselves), unmapped when this goes.
class MappedFile {
public:
  static Expected<MappedFile> open(const std::string& path);
  MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr, o.size_ = 0; }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;
  ~MappedFile();
  const char* data() const { return data_; }
  size_t size() const { return size_; }

private:
  MappedFile(const char* data, size_t size) : data_(data), size_(size) {}
  const char* data_;
  size_t size_;
};

} // namespace sgc
