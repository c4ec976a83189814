// Model loading and tensor conversion for the driver.
#include "driver/Common.h"

#include "frontend/onnx/Importer.h"
#include "ir/Text.h"
#include "ir/Verifier.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace sgc::driver {

static bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Expected<std::unique_ptr<ir::Graph>> loadModel(const std::string& path) {
  if (!endsWith(path, ".sgcir")) return onnx_import::importModel(path);
  std::ifstream f(path);
  if (!f) return makeError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  auto g = ir::parse(ss.str(), path, {true});
  if (!g) return g.takeError();
  if (Error e = ir::verify(**g)) return makeError(path + ": " + errorText(std::move(e)));
  return g;
}

Expected<ir::Tensor> fromSafetensors(const rt::StTensor& t, const std::string& what) {
  auto d = ir::dtypeFromSafetensors(t.dtype);
  if (!d) return makeError(what + ": unsupported dtype " + t.dtype);
  ir::Tensor r;
  r.dtype = *d;
  r.shape = t.shape;
  r.bytes = t.data;
  return r;
}

rt::StTensor toSafetensors(const ir::Tensor& t) {
  return rt::StTensor{std::string(ir::dtypeSafetensorsName(t.dtype)), t.shape, t.bytes};
}

int reportError(const std::string& msg) {
  fprintf(stderr, "sgc: error: %s\n", msg.c_str());
  return 1;
}

int reportError(Error e) { return reportError(errorText(std::move(e))); }

std::string withCommas(int64_t n) {
  std::string s = std::to_string(n), r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0 && s[i - 1] != '-') r += ',';
    r += s[i];
  }
  return r;
}

} // namespace sgc::driver
