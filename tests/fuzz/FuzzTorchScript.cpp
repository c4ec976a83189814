// libFuzzer target over the TorchScript reader: any bytes must give a graph
// or an error, never a crash, leak or out-of-bounds access (built with ASan
// and UBSan). The first byte picks the reader: 'Z' the whole archive (zip,
// pickles, code, tensors, aten ops), 'P' the unpickler alone, 'C' the code
// parser alone, so that mutations reach the inner readers without having to
// keep a zip's checksums right.
#include "frontend/torchscript/Importer.h"
#include "frontend/torchscript/Pickle.h"
#include "frontend/torchscript/Script.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'P') {
    auto p = sgc::ts_import::unpickle(bytes, "fuzz.pkl");
    if (!p) llvm::consumeError(p.takeError());
  } else if (data[0] == 'C') {
    auto c = sgc::ts_import::parseCode(bytes, "__torch__", "fuzz.py");
    if (!c) llvm::consumeError(c.takeError());
  } else {
    // The seeds' forward(x, y), typed as they were traced (torch 1.13 keeps no traced inputs).
    static const sgc::ts_import::Options options{{{"x", sgc::ir::Type::of(sgc::ir::DType::F32, {2, 4})}, {"y", sgc::ir::Type::of(sgc::ir::DType::I64, {2})}}};
    auto g = sgc::ts_import::importArchiveBytes(std::move(bytes), "fuzz.pt", options);
    if (!g) llvm::consumeError(g.takeError());
  }
  return 0;
}
