// The layout side of the collectives (runtime/Comm.h, runtime/Program.h):
// which bytes one all-reduce covers, and which launch must wait for it. The
// compiled sample with --data-parallel must put each bucket's gradients back
// to back (one span per bucket), and a collective must finish before any
// later launch touches its tensors.
#include "codegen/Program.h"
#include "frontend/onnx/Importer.h"
#include "ir/training/TrainingStep.h"
#include "runtime/Comm.h"
#include "runtime/Program.h"

#include <gtest/gtest.h>

using namespace sgc;

namespace {

TEST(ContiguousSpans, MergesAcrossPaddingOnly) {
  // Tensors 0..3: f32 at 0 (40 bytes), f32 at 64 (64 bytes), f64 at 128 (16 bytes), f32 at 256 (8 bytes);
  // tensor 4 (f32 at 44) is not there yet.
  rt::Program p;
  p.alignment = 64;
  for (auto [dtype, bytes] : std::vector<std::pair<std::string, uint64_t>>{{"F32", 40}, {"F32", 64}, {"F64", 16}, {"F32", 8}, {"F32", 8}})
    p.tensors.push_back({"t", rt::TensorKind::Result, 5, 0, bytes, dtype, {}, 1, std::nullopt});
  std::vector<uint64_t> address{0, 64, 128, 256, 1024};
  auto spans = rt::contiguousSpans(p, {1, 0, 2, 3}, address);
  ASSERT_EQ(spans.size(), 3u); // 0+1 through the padding; 2 is f64; 3 lies past a 64-byte gap
  EXPECT_EQ(spans[0].address, 0u);
  EXPECT_EQ(spans[0].count, 32u); // (64 + 64) / 4
  EXPECT_EQ(spans[1].dtype, "F64");
  EXPECT_EQ(spans[2].address, 256u);
  // Now tensor 4 lies in the gap between 0 and 1 and is not reduced: no merging across it.
  address[4] = 44;
  spans = rt::contiguousSpans(p, {0, 1}, address);
  EXPECT_EQ(spans.size(), 2u);
}

rt::Program compiledWithBuckets(double bucketMb) {
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  ir::TrainingOptions o;
  o.optimizer.kind = "adamw";
  o.dataParallel = "allreduce";
  o.bucketMb = bucketMb;
  EXPECT_FALSE(ir::buildTrainingStep(**g, o));
  auto p = codegen::buildProgram(**g, "test");
  EXPECT_TRUE(!!p) << errorText(p.takeError());
  rt::Program prog;
  std::string error;
  EXPECT_TRUE(rt::parseProgram(p->programJson.data(), p->programJson.size(), p->weights.size(), prog, error)) << error;
  return prog;
}

/// Each tensor's address in an arena laid out as the session lays it out.
std::vector<uint64_t> addresses(const rt::Program& p) {
  uint64_t start[rt::kNumRegions];
  rt::regionOffsets(p, start);
  std::vector<uint64_t> a;
  for (const rt::TensorDesc& t : p.tensors) a.push_back(start[t.region] + t.offset);
  return a;
}

TEST(Collectives, EachBucketIsOneSpanAndIsWaitedForBeforeUse) {
  rt::Program p = compiledWithBuckets(0.001);
  std::vector<uint64_t> address = addresses(p);
  auto spans = rt::allReduceSpans(p, address);
  auto waits = rt::collectiveWaits(p, address);
  int collectives = 0, waited = 0;
  for (size_t i = 0; i < p.launches.size(); ++i) {
    if (!p.launches[i].collective) continue;
    ++collectives;
    EXPECT_EQ(spans[i].size(), 1u)
        << "collective " << i << " is not one run of bytes";
    for (size_t j = 0; j <= i; ++j)
      for (int w : waits[j]) EXPECT_NE(w, (int)i) << "launch " << j << " waits for a later collective";
    for (size_t j = i + 1; j < p.launches.size(); ++j)
      for (int w : waits[j]) waited += w == (int)i;
  }
  EXPECT_GT(collectives, 2); // the loss and several gradient buckets
  EXPECT_EQ(waited, collectives); // each bucket by its optimizer update; the loss by the check that it is finite
}

TEST(Collectives, MalformedCollectiveIsRefused) {
  std::string json = R"({"kernel": -1, "serial": true, "forward": true, "extent": 0, "args": [],
                         "collective": {"op": "allreduce", "average": true, "tensors": [100000]}})";
  // Splice the bad launch into a real program's description.
  auto g = onnx_import::importModel(SGC_SOURCE_DIR "/samples/mlp_train.onnx");
  ASSERT_TRUE(!!g);
  ir::TrainingOptions o;
  ASSERT_FALSE(ir::buildTrainingStep(**g, o));
  auto p = codegen::buildProgram(**g, "test");
  ASSERT_TRUE(!!p);
  std::string text = p->programJson;
  size_t at = text.find("\"launches\":[") + 12;
  text.insert(at, json + ",");
  rt::Program prog;
  std::string error;
  EXPECT_FALSE(rt::parseProgram(text.data(), text.size(), p->weights.size(), prog, error));
  EXPECT_NE(error.find("collective"), std::string::npos) << error;
}

} // namespace
