// libFuzzer target over the safetensors reader (data files and checkpoints):
// any bytes must give tensors or an error, never a crash or an out-of-bounds
// access (built with ASan and UBSan). Tensors read must tile the data exactly.
#include "runtime/Safetensors.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sgc::rt::StFile file;
  std::string error;
  if (!sgc::rt::parseSafetensors(data, size, "fuzz.safetensors", file, error)) return 0;
  size_t total = 0;
  for (const auto& [name, t] : file) {
    size_t numel = 1;
    for (int64_t d : t.shape) numel *= (size_t)d;
    if (t.data.size() != numel * sgc::rt::stDTypeSize(t.dtype)) std::abort(); // a tensor's bytes are its shape's
    total += t.data.size();
  }
  if (total > size) std::abort();
  return 0;
}
