// The bundled sample, imported and run on the interpreter, matches the
// outputs PyTorch computed for it (samples/make_mlp.py).
#include "frontend/onnx/Importer.h"
#include "ir/interp/Interpreter.h"
#include "runtime/Safetensors.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace sgc;

namespace {
ir::Tensor readF32(const std::string& path, const std::string& name) {
  rt::StFile f;
  std::string err;
  EXPECT_TRUE(rt::readSafetensors(path, f, err)) << err;
  const rt::StTensor& st = f.at(name);
  ir::Tensor t;
  t.dtype = ir::DType::F32;
  t.shape = st.shape;
  t.bytes = st.data;
  return t;
}
} // namespace

TEST(Sample, MlpMatchesPyTorch) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp.onnx");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ir::Tensor x = readF32(SGC_SOURCE_DIR "/samples/mlp_inputs.safetensors", "x");
  ir::Tensor want = readF32(SGC_SOURCE_DIR "/samples/mlp_expected.safetensors", "logits");
  auto out = ir::run(**g, {{"x", x}});
  ASSERT_TRUE(!!out) << errorText(out.takeError());
  const ir::Tensor& got = out->at("logits");
  ASSERT_EQ(got.shape, want.shape);
  double worst = 0;
  for (int64_t i = 0; i < got.numel(); ++i) worst = std::max(worst, std::fabs(got.getF(i) - want.getF(i)));
  EXPECT_LT(worst, 1e-5);
}

TEST(Safetensors, RejectsCorruptHeaders) {
  std::string err;
  rt::StFile f;
  auto parse = [&](const std::string& header, size_t bodyBytes) {
    std::string s(8, '\0');
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) s[i] = (char)(n >> (8 * i));
    s += header + std::string(bodyBytes, '\0');
    f.clear();
    return rt::parseSafetensors((const uint8_t*)s.data(), s.size(), "t.safetensors", f, err);
  };
  EXPECT_TRUE(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)) << err;
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,9]}})", 8));
  EXPECT_NE(err.find("outside the file"), std::string::npos) << err;
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8));
  EXPECT_NE(err.find("expected 12"), std::string::npos) << err;
  EXPECT_FALSE(parse(R"({"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", 8));
  EXPECT_FALSE(parse(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8));
  EXPECT_FALSE(parse(R"([1,2])", 0));
  EXPECT_FALSE(parse(R"({"a":)", 0));
  std::string tiny = "abc";
  EXPECT_FALSE(rt::parseSafetensors((const uint8_t*)tiny.data(), tiny.size(), "t", f, err));
}
