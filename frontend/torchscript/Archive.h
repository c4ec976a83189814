// A TorchScript archive (the zip that torch.jit.save writes): its entries by
// name, read through libzip. Every entry lives under one top folder (the
// archive's record name); names here are relative to it ("data.pkl",
// "code/__torch__/m.py", "data/0").
#pragma once
#include "ir/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace sgc::ts_import {

class Archive {
public:
  /// Opens the archive at `path`, or the bytes of one (`name` is then used in errors).
  static Expected<std::unique_ptr<Archive>> open(const std::string& path);
  static Expected<std::unique_ptr<Archive>> fromBytes(std::string bytes, const std::string& name);
  ~Archive();

  /// The entry's bytes; an error naming the archive and the entry when it is absent or unreadable.
  Expected<std::string> read(const std::string& entry) const;
  bool has(const std::string& entry) const;
  /// Entry names (relative to the top folder), in the archive's order.
  const std::vector<std::string>& entries() const { return names_; }
  const std::string& name() const { return name_; }

private:
  Archive() = default;
  std::string name_, prefix_, bytes_;
  struct Zip;
  Zip* zip_ = nullptr;
  std::vector<std::string> names_;
  std::vector<int64_t> index_; ///< libzip's index of each of names_
};

} // namespace sgc::ts_import
