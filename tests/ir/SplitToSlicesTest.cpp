// The split-to-slices pass: a static Split becomes one Slice per result, and
// the graph's results are the reference interpreter's on the graph before it;
// a Split of a dynamic input is left alone.
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"
#include "ir/passes/SplitToSlices.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace sgc;
using namespace sgc::ir;

namespace {

std::unique_ptr<Graph> parsed(const std::string& input) {
  auto g = parse("graph @g {\n input %x : " + input + "\n"
                 " %a : ?[*], %b : ?[*], %c : ?[*] = Split(%x) {axis = -1, num_outputs = 3}\n"
                 " %y : ?[*] = Sub(%c, %a)\n %z : ?[*] = Transpose(%b) {perm = [1, 0]}\n output %y\n output %z\n}", "split");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(inferShapes(**g, false));
  return std::move(*g);
}

int splits(const Graph& g) {
  return (int)std::count_if(g.nodes().begin(), g.nodes().end(), [](const auto& n) { return n->op == Op::Split; });
}

} // namespace

TEST(SplitToSlices, ASliceAResultGivesTheSameResults) {
  auto before = parsed("f32[2, 6]"), after = parsed("f32[2, 6]");
  int count = -1;
  ASSERT_FALSE(splitToSlices(*after, &count));
  EXPECT_EQ(count, 1);
  EXPECT_EQ(splits(*after), 0);
  std::vector<double> x;
  for (int i = 0; i < 12; ++i) x.push_back(i * i - 3.5);
  std::map<std::string, Tensor> in{{"x", Tensor::fromF64(DType::F32, {2, 6}, x)}};
  auto want = run(*before, in), got = run(*after, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  ASSERT_TRUE(!!got) << errorText(got.takeError());
  for (const char* name : {"y", "z"}) {
    EXPECT_EQ(got->at(name).toF64(), want->at(name).toF64()) << name;
    EXPECT_EQ(got->at(name).shape, want->at(name).shape) << name;
  }
}

TEST(SplitToSlices, ADynamicSplitIsLeftAlone) {
  auto g = parsed("f32[batch, 6]");
  int count = -1;
  ASSERT_FALSE(splitToSlices(*g, &count));
  EXPECT_EQ(count, 0);
  EXPECT_EQ(splits(*g), 1);
}
