// A dlopened library's function table, loaded on first use and kept for the
// life of the process, never unloaded: CUDA's libraries keep process-wide
// state (the primary contexts; cuBLASLt's runtime) that does not survive
// dlclose. `Api` has `bool load(std::string& error)`.
#pragma once
#include <mutex>
#include <string>

namespace sgc::rt {

template <class Api>
const Api* loadOnce(std::string& error) {
  static std::mutex mutex;
  static const Api* api = nullptr;
  static std::string loadError;
  std::lock_guard<std::mutex> lock(mutex);
  if (!api && loadError.empty()) {
    auto* a = new Api();
    if (a->load(loadError)) api = a;
  }
  if (!api) error = loadError;
  return api;
}

} // namespace sgc::rt
