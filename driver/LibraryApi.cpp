// Resolving a compiled library's C ABI (see LibraryApi.h).
#include "driver/LibraryApi.h"

#include <dlfcn.h>

namespace sgc::driver {

Api::~Api() {
  if (handle) dlclose(handle);
}

bool Api::complete() const {
  bool all = true;
#define SGC_FN(name) all = all && name;
  SGC_LATER_FUNCTIONS(SGC_FN)
#undef SGC_FN
  return all;
}

Error loadApi(const std::string& path, Api& api) {
  std::string p = path.find('/') == std::string::npos ? "./" + path : path; // never search the library path
  api.handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.handle) return makeError(path + ": cannot load: " + dlerror());
#define SGC_FN(name)                                                                        \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.handle, #name));               \
  if (!api.name) return makeError(path + ": not a library compiled by this sgc (no " #name ")");
  SGC_LIBRARY_FUNCTIONS(SGC_FN)
#undef SGC_FN
#define SGC_FN(name) api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.handle, #name));
  SGC_LATER_FUNCTIONS(SGC_FN)
#undef SGC_FN
  if (api.sgc_abi_version() != SGC_ABI_VERSION)
    return makeError(path + ": ABI version " + std::to_string(api.sgc_abi_version()) + ", this sgc speaks " + std::to_string(SGC_ABI_VERSION));
  return Error::success();
}

} // namespace sgc::driver
