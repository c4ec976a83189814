// A dlopened library's function table, loaded on first use and kept for the
// life of the process, never unloaded: CUDA's libraries keep process-wide
// state (the primary contexts; cuBLASLt's runtime) that does not survive
// dlclose. `Api` has `bool load(std::string& error)`.
#pragma once
#include <cstdlib>
#include <dlfcn.h>
#include <initializer_list>
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

/// The first of the path in environment variable `env` (when set) and `candidates` that dlopen loads
/// (RTLD_LOCAL); nullptr when none does.
inline void* openFirst(const char* env, std::initializer_list<const char*> candidates) {
  if (const char* path = std::getenv(env))
    if (void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL)) return lib;
  for (const char* c : candidates)
    if (void* lib = dlopen(c, RTLD_NOW | RTLD_LOCAL)) return lib;
  return nullptr;
}

/// A function (or object) to find in a dlopened library, and where to keep its address.
struct Symbol {
  const char* name;
  void** slot;
};

/// Finds every symbol in `lib`; on the first one missing, `error` names it (after `what`) and false.
inline bool resolveAll(void* lib, std::initializer_list<Symbol> symbols, const std::string& what, std::string& error) {
  for (const Symbol& s : symbols)
    if (!(*s.slot = dlsym(lib, s.name))) {
      error = what + " lacks " + s.name;
      return false;
    }
  return true;
}

} // namespace sgc::rt
