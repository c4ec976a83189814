// libFuzzer target over the ONNX importer: any bytes must give a graph or an
// error, never a crash, leak or out-of-bounds access (built with ASan and
// UBSan). An imported graph is also printed and parsed back.
#include "frontend/onnx/Importer.h"
#include "ir/Text.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = sgc::onnx_import::importModelBytes(data, size, "fuzz.onnx", "");
  if (!g) {
    llvm::consumeError(g.takeError());
    return 0;
  }
  auto back = sgc::ir::parse(sgc::ir::print(**g), "fuzz");
  if (!back) llvm::consumeError(back.takeError());
  return 0;
}
