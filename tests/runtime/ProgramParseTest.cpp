// The runtime's reader of a compiled program (runtime/Program.h) takes what
// the compiler writes, and refuses a description whose GEMMs or GPU launches
// would reach outside their tensors, name no kernel or start off alignment: a corrupt train.so is
// an error, never an out-of-bounds access.
#include "codegen/Program.h"
#include "frontend/onnx/Importer.h"
#include "ir/training/TrainingStep.h"
#include "runtime/Program.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace sgc;

namespace {

nlohmann::json compiledSample() {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  EXPECT_FALSE(ir::buildTrainingStep(**g, o));
  auto p = codegen::buildProgram(**g, "test");
  EXPECT_TRUE(!!p) << errorText(p.takeError());
  return nlohmann::json::parse(p->programJson);
}

std::string parseError(const nlohmann::json& j) {
  std::string text = j.dump(), error;
  rt::Program p;
  return rt::parseProgram(text.data(), text.size(), 1 << 20, p, error) ? "" : error;
}

/// The first launch that has `key`.
nlohmann::json& launchWith(nlohmann::json& j, const char* key) {
  for (auto& l : j["launches"])
    if (l.contains(key)) return l;
  ADD_FAILURE() << "no launch with " << key;
  return j["launches"][0];
}

} // namespace

TEST(ProgramParse, ReadsWhatTheCompilerWrites) {
  nlohmann::json j = compiledSample();
  std::string text = j.dump(), error;
  rt::Program p;
  ASSERT_TRUE(rt::parseProgram(text.data(), text.size(), 1 << 20, p, error)) << error;
  int gemms = 0, epilogues = 0, gpuForms = 0;
  for (const rt::Launch& l : p.launches) {
    gemms += l.gemm.has_value();
    epilogues += l.epilogue.kernel >= 0;
    gpuForms += l.gpu.has_value();
  }
  EXPECT_EQ(gemms, 8); // the sample MLP's forward and backward products
  EXPECT_EQ(epilogues, 3);
  // The loss with its gradient: one node, two CPU launches, on a GPU the first's kernels in place
  // of both; and nine small launches (the eight AdamW updates, two small elementwise kernels),
  // on a GPU two launches (codegen/FuseLaunches.h).
  EXPECT_EQ(gpuForms, 2 + 9);
}

TEST(ProgramParse, RefusesGemmsOutsideTheirTensors) {
  for (const char* field : {"m", "n", "k", "batch"}) {
    nlohmann::json j = compiledSample();
    nlohmann::json& gemm = launchWith(j, "gemm")["gemm"];
    gemm[field] = gemm[field].get<int64_t>() + 1000000;
    EXPECT_NE(parseError(j).find("do not fit"), std::string::npos) << field;
  }
  for (const char* field : {"stride_a", "stride_b"}) { // (a stride past the tensor needs a batch past it too: above)
    nlohmann::json j = compiledSample();
    launchWith(j, "gemm")["gemm"][field] = -1;
    EXPECT_NE(parseError(j).find("do not fit"), std::string::npos) << field;
  }
  nlohmann::json j = compiledSample();
  launchWith(j, "gemm")["gemm"]["dtype"] = "I64";
  EXPECT_NE(parseError(j).find("malformed"), std::string::npos);
  j = compiledSample();
  launchWith(j, "gemm")["gemm"]["a"] = 1 << 30;
  EXPECT_NE(parseError(j).find("malformed"), std::string::npos);
}

TEST(ProgramParse, RefusesGpuLaunchesNamingNothing) {
  nlohmann::json j = compiledSample();
  launchWith(j, "epilogue")["epilogue"]["kernel"] = 1 << 20;
  EXPECT_NE(parseError(j).find("malformed"), std::string::npos);
  j = compiledSample();
  launchWith(j, "gpu")["gpu"][0]["args"][0] = -1;
  EXPECT_NE(parseError(j).find("malformed"), std::string::npos);
  j = compiledSample();
  nlohmann::json& l = launchWith(j, "epilogue");
  l.erase("gemm"); // an epilogue without its GEMM
  EXPECT_NE(parseError(j).find("malformed"), std::string::npos);
  for (int threads : {0, 48, 2048}) { // a GPU block of threads that is not whole warps, or too many
    j = compiledSample();
    launchWith(j, "gpu")["gpu"][0]["threads"] = threads;
    EXPECT_NE(parseError(j).find("malformed"), std::string::npos) << threads;
  }
  for (int64_t shared : {int64_t(-1), int64_t(228) << 10}) { // dynamic shared memory a GPU block cannot have
    j = compiledSample();
    launchWith(j, "gpu")["gpu"][0]["shared"] = shared;
    EXPECT_NE(parseError(j).find("malformed"), std::string::npos) << shared;
  }
  j = compiledSample();
  launchWith(j, "gpu")["gpu"][0]["shared"] = int64_t(96) << 10;
  EXPECT_EQ(parseError(j), "");
}

TEST(ProgramParse, RefusesMisalignedTensors) {
  nlohmann::json j = compiledSample();
  for (auto& t : j["tensors"])
    if (t["offset"].get<uint64_t>() >= 16) {
      t["offset"] = t["offset"].get<uint64_t>() - 2; // GPU kernels load 16 bytes at a time from each tensor
      break;
    }
  EXPECT_NE(parseError(j).find("aligned"), std::string::npos);
}

TEST(ProgramParse, GemmBiasesFitTheirTensors) {
  // The sample's layers (MatMul, then Add of a bias) let cuBLASLt add the bias: the GEMM names it
  // and keeps its epilogue kernel (for a cuBLASLt without an algorithm for the epilogue). A bias
  // smaller than the GEMM's columns, or of another dtype, is refused.
  nlohmann::json j = compiledSample();
  int biases = 0;
  for (const auto& l : j["launches"])
    if (l.contains("gemm") && l["gemm"].contains("bias")) {
      ++biases;
      EXPECT_TRUE(l.contains("epilogue"));
    }
  EXPECT_GE(biases, 1);
  for (const char* other : {"loss", "step"}) { // an f32 scalar; an i64 scalar
    nlohmann::json bad = j;
    for (auto& l : bad["launches"])
      if (l.contains("gemm") && l["gemm"].contains("bias")) l["gemm"]["bias"] = bad[other];
    EXPECT_NE(parseError(bad).find("bias does not fit"), std::string::npos) << other;
  }
}

TEST(ProgramParse, GemmGelusNameTheirTensorsAndALaterLaunch) {
  // A GEMM whose epilogue computes a GELU names its result (a tensor of y's shape and dtype), y
  // for its aux output, its bias, and the later launch it makes unneeded.
  nlohmann::json j = compiledSample();
  size_t at = 0;
  while (at < j["launches"].size() && !j["launches"][at].contains("gemm")) ++at;
  ASSERT_LT(at + 1, j["launches"].size());
  nlohmann::json& gemm = j["launches"][at]["gemm"];
  gemm["gelu"] = {{"result", gemm["y"]}, {"aux", gemm["y"]}, {"bias", -1}, {"skip", at + 1}};
  EXPECT_EQ(parseError(j), "");
  for (size_t skip : {at, j["launches"].size()}) {
    nlohmann::json bad = j;
    bad["launches"][at]["gemm"]["gelu"]["skip"] = skip;
    EXPECT_NE(parseError(bad).find("names a bad launch"), std::string::npos) << skip;
  }
  for (const char* field : {"result", "aux", "bias"}) {
    nlohmann::json bad = j;
    bad["launches"][at]["gemm"]["gelu"][field] = j["loss"];
    EXPECT_NE(parseError(bad).find("GELU does not fit"), std::string::npos) << field;
  }
}
