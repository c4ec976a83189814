// The archive reader (see Archive.h). The whole file is held in memory and
// libzip reads it from there; each entry's size is checked against the bytes
// it decompresses to, so a truncated or corrupted archive is an error.
#include "frontend/torchscript/Archive.h"

#include "ir/File.h"

#include <zip.h>

#include <algorithm>
#include <iterator>

namespace sgc::ts_import {

struct Archive::Zip {
  zip_t* z = nullptr;
};

constexpr uint64_t kMaxEntryBytes = uint64_t(1) << 36; ///< 64 GiB: larger is a corrupted header

Expected<std::unique_ptr<Archive>> Archive::open(const std::string& path) {
  auto bytes = readWholeFile(path);
  if (!bytes) return bytes.takeError();
  return fromBytes(std::move(*bytes), path);
}

Expected<std::unique_ptr<Archive>> Archive::fromBytes(std::string bytes, const std::string& name) {
  std::unique_ptr<Archive> a(new Archive);
  a->name_ = name;
  a->bytes_ = std::move(bytes);
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(a->bytes_.data(), a->bytes_.size(), 0, &err);
  if (!src) return makeError(name + ": " + zip_error_strerror(&err));
  zip_t* z = zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &err);
  if (!z) {
    std::string why = zip_error_strerror(&err);
    zip_source_free(src);
    zip_error_fini(&err);
    return makeError(name + ": not a TorchScript archive (a zip file): " + why);
  }
  a->zip_ = new Zip{z};
  zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* entry = zip_get_name(z, (zip_uint64_t)i, ZIP_FL_ENC_RAW);
    if (!entry) return makeError(name + ": entry " + std::to_string(i) + " has no readable name");
    std::string s = entry;
    size_t slash = s.find('/');
    if (slash == std::string::npos || slash == 0) return makeError(name + ": entry '" + s + "' is not inside the archive's top folder");
    std::string top = s.substr(0, slash + 1);
    if (a->prefix_.empty()) a->prefix_ = top;
    if (top != a->prefix_) return makeError(name + ": entries under both '" + a->prefix_ + "' and '" + top + "': not one TorchScript archive");
    a->names_.push_back(s.substr(slash + 1));
    a->index_.push_back(i);
  }
  if (a->names_.empty()) return makeError(name + ": the archive is empty");
  return a;
}

Archive::~Archive() {
  if (zip_) zip_discard(zip_->z);
  delete zip_;
}

bool Archive::has(const std::string& entry) const { return std::find(names_.begin(), names_.end(), entry) != names_.end(); }

Expected<std::string> Archive::read(const std::string& entry) const {
  auto it = std::find(names_.begin(), names_.end(), entry);
  if (it == names_.end()) return makeError(name_ + ": the archive has no entry '" + entry + "'");
  zip_uint64_t index = (zip_uint64_t)index_[it - names_.begin()];
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(zip_->z, index, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
    return makeError(name_ + ": entry '" + entry + "': " + zip_strerror(zip_->z));
  // Deflate expands at most 1032 times: a larger claim is a corrupted (or hostile) header.
  bool tooLarge = st.size > kMaxEntryBytes || ((st.valid & ZIP_STAT_COMP_SIZE) && st.size > st.comp_size * 1032 + 1024);
  if (tooLarge) return makeError(name_ + ": entry '" + entry + "' claims " + std::to_string(st.size) + " bytes, more than its data could hold");
  zip_file_t* f = zip_fopen_index(zip_->z, index, 0);
  if (!f) return makeError(name_ + ": entry '" + entry + "': " + zip_strerror(zip_->z));
  std::string out(st.size, '\0');
  zip_int64_t got = zip_fread(f, out.data(), st.size);
  std::string why = got < 0 ? zip_error_strerror(zip_file_get_error(f)) : "";
  zip_fclose(f);
  if (got < 0) return makeError(name_ + ": entry '" + entry + "' cannot be read: " + why);
  if ((zip_uint64_t)got != st.size)
    return makeError(name_ + ": entry '" + entry + "' holds " + std::to_string(got) + " bytes, its header says " + std::to_string(st.size));
  return out;
}

} // namespace sgc::ts_import
