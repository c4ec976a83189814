// Row-wise ops with the elementwise groups around them (codegen::kernelSchedule,
// kir::lowerRowGroupGpu): which groups merge, what the GPU form reads and
// writes, and that the CPU runs the same kernels as without the merge.
#include "codegen/Program.h"
#include "codegen/kir/LowerOps.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace sgc;

namespace {

std::unique_ptr<ir::Graph> parsed(const std::string& text) {
  auto g = ir::parse(text, "rows");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  return std::move(*g);
}

std::vector<std::string> labels(const std::vector<std::vector<const ir::Node*>>& schedule) {
  std::vector<std::string> out;
  for (const auto& group : schedule) {
    std::string l;
    for (const ir::Node* n : group) l += (l.empty() ? "" : "+") + std::string(ir::opName(n->op));
    out.push_back(l);
  }
  return out;
}

/// The names of kernel `k`'s buffers: those it writes, those it only reads.
std::pair<std::vector<std::string>, std::vector<std::string>> writtenAndRead(const kir::Kernel& k) {
  std::pair<std::vector<std::string>, std::vector<std::string>> out;
  for (const kir::BufferArg& b : k.buffers) (b.written ? out.first : out.second).push_back(b.name);
  return out;
}

/// Attention's scores: bf16 product, scaled and masked in f32, softmax, cast back for the next product.
std::string attention(const std::string& extraOutput) {
  return R"(graph @g {
    input %q : bf16[2, 64, 32]
    input %k : bf16[2, 32, 64]
    input %mask : bool[1, 64, 64]
    input %v : bf16[2, 64, 32]
    const %scale : f32[] = dense<"0x0000003e">
    const %ninf : f32[] = dense<"0x000080ff">
    %s : ?[*] = MatMul(%q, %k)
    %f : ?[*] = Cast(%s) {to = "f32"}
    %m : ?[*] = Mul(%f, %scale)
    %w : ?[*] = Where(%mask, %m, %ninf)
    %p : ?[*] = Softmax(%w) {axis = -1}
    %pb : ?[*] = Cast(%p) {to = "bf16"}
    %y : ?[*] = MatMul(%pb, %v)
    output %y
)" + extraOutput + "}";
}

} // namespace

TEST(RowGroups, SoftmaxTakesItsScaleMaskAndCast) {
  auto g = parsed(attention(""));
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(labels(schedule), (std::vector<std::string>{"MatMul", "Cast+Mul+Where+Softmax+Cast", "MatMul"}));
  const auto& group = schedule[1];
  kir::RowGroup rows{{group.begin(), group.begin() + 3}, group[3], {group.begin() + 4, group.end()}, false, {}};
  auto gpu = kir::lowerRowGroupGpu("k", rows);
  ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
  ASSERT_TRUE(gpu->has_value());
  ASSERT_EQ((*gpu)->size(), 1u);
  // It reads the bf16 scores and the mask (and the two scalars) and writes only the bf16 probabilities:
  // neither the masked f32 scores nor the f32 probabilities are stored.
  auto [written, read] = writtenAndRead((**gpu)[0]);
  EXPECT_EQ(written, (std::vector<std::string>{"pb"}));
  EXPECT_EQ(read.size(), 4u);
  EXPECT_TRUE(std::count(read.begin(), read.end(), "s") && std::count(read.begin(), read.end(), "mask"));
  rows.storeResult = true; // others read the probabilities too (a gradient): stored as well
  auto both = kir::lowerRowGroupGpu("k", rows);
  ASSERT_TRUE(!!both && both->has_value());
  EXPECT_EQ(writtenAndRead((**both)[0]).first, (std::vector<std::string>{"p", "pb"}));
}

TEST(RowGroups, APrologueReadElsewhereStaysItsOwnKernel) {
  // %w is an output too: it must be stored, so the softmax does not take its group.
  auto g = parsed(attention("    output %w\n"));
  EXPECT_EQ(labels(codegen::kernelSchedule(*g)), (std::vector<std::string>{"MatMul", "Cast+Mul+Where", "Softmax+Cast", "MatMul"}));
}

TEST(RowGroups, TheMemoryPlanSeesOneStep) {
  // The scores and the probabilities are live at the same step: their bytes never overlap, so the
  // GPU kernel may read the one while it writes the other.
  auto g = parsed(attention(""));
  auto schedule = codegen::kernelSchedule(*g);
  auto plan = codegen::planMemory(*g, schedule, 64);
  ASSERT_TRUE(!!plan) << errorText(plan.takeError());
  const codegen::Buffer *s = nullptr, *pb = nullptr;
  for (const auto& b : plan->buffers) {
    if (b.value->name == "s") s = &b;
    if (b.value->name == "pb") pb = &b;
  }
  ASSERT_TRUE(s && pb);
  EXPECT_EQ(s->last, 1);
  EXPECT_EQ(pb->first, 1);
  EXPECT_EQ(s->region, pb->region);
  EXPECT_TRUE(s->offset + s->bytes <= pb->offset || pb->offset + pb->bytes <= s->offset);
}

TEST(RowGroups, LayerNormGradTakesAnEarlierCastAndTwoEpilogueGroups) {
  // As autocast's backward pass makes it: dy comes in bf16 and is widened (then something else
  // runs), the residual gradient is added to dx and narrowed for the next product. The widening
  // moves to the layer norm; the add and the cast follow it; the GPU's kernel (dx with dscale and
  // dbias, after their zeroing) reads dy as bf16 and writes the residual gradient (read by another
  // node) and its bf16 copy, never dx alone.
  auto g = parsed(R"(graph @g {
    input %x : f32[64, 64]
    input %w : f32[64]
    input %dyb : bf16[64, 64]
    input %r : f32[64, 64]
    input %mean : f32[64, 1]
    input %inv : f32[64, 1]
    %dy : ?[*] = Cast(%dyb) {to = "f32"}
    %other : ?[*] = Neg(%x)
    %dx : ?[*], %ds : ?[*], %db : ?[*] = LayerNormGrad(%x, %w, %dy, %mean, %inv) {axis = -1}
    %sum : ?[*] = Add(%r, %dx)
    %sumb : ?[*] = Cast(%sum) {to = "bf16"}
    output %sumb, %sum, %other, %ds, %db
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(labels(schedule), (std::vector<std::string>{"Neg", "Cast+LayerNormGrad+Add+Cast"}));
  const auto& group = schedule[1];
  kir::RowGroup rows{{group[0]}, group[1], {group[2], group[3]}, false, {true, true}};
  auto gpu = kir::lowerRowGroupGpu("k", rows);
  ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
  ASSERT_TRUE(gpu->has_value());
  ASSERT_EQ((*gpu)->size(), 3u);
  EXPECT_TRUE(kir::isZeroing((**gpu)[0]) && kir::isZeroing((**gpu)[1]));
  auto [written, read] = writtenAndRead((**gpu)[2]);
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, (std::vector<std::string>{"db", "ds", "sum", "sumb"}));
  EXPECT_TRUE(std::count(read.begin(), read.end(), "dyb") && !std::count(read.begin(), read.end(), "dy"));
  // (The CPU runs the cast, the layer norm's kernels and one kernel per stored epilogue result:
  // tests/training/torch_equivalence.py trains GPT in bf16 through them.)
}

namespace {

/// Three gradients of an RMS norm's output summed in two adds, a product (and a Neg) between
/// them, and the norm's gradient; `outputs` names what the graph gives out besides dx and ds.
std::string threeGradients(const std::string& outputs) {
  return R"(graph @g {
    input %x : f32[64, 64]
    input %w : f32[64]
    input %inv : f32[64, 1]
    input %a : bf16[64, 64]
    input %b : bf16[64, 64]
    input %h : bf16[64, 32]
    input %wq : bf16[32, 64]
    %ab : ?[*] = Add(%a, %b)
    %c : ?[*] = MatMul(%h, %wq)
    %other : ?[*] = Neg(%x)
    %abc : ?[*] = Add(%ab, %c)
    %dy : ?[*] = Cast(%abc) {to = "f32"}
    %dx : ?[*], %ds : ?[*] = RmsNormGrad(%x, %w, %dy, %inv) {axis = -1}
    output %dx, %ds, )" + outputs + "\n  }";
}

} // namespace

TEST(RowGroups, ARowOpTakesTheGroupsFeedingItsPrologue) {
  // A Llama's RMS norm output feeds the q, k and v projections: the backward pass adds their
  // three dx, the first two as soon as both are ready, the third after q's product. The first sum
  // joins the norm gradient's prologue too, so that the GPU reads the three gradients where it
  // adds them, and stores no sum between; the CPU runs the same kernels as before.
  auto g = parsed(threeGradients("%other"));
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(labels(schedule), (std::vector<std::string>{"MatMul", "Neg", "Add+Add+Cast+RmsNormGrad"}));
  const auto& group = schedule[2];
  ASSERT_EQ(group.size(), 4u);
  auto gpu = kir::lowerRowGroupGpu("k", kir::RowGroup{{group[0], group[1], group[2]}, group[3], {}, true, {}});
  ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
  ASSERT_TRUE(gpu->has_value());
  bool readsThree = false, readsSum = false;
  for (const kir::Kernel& k : **gpu) {
    auto [written, read] = writtenAndRead(k);
    readsThree = readsThree || (std::count(read.begin(), read.end(), "a") && std::count(read.begin(), read.end(), "b") && std::count(read.begin(), read.end(), "c"));
    readsSum = readsSum || std::count(read.begin(), read.end(), "ab") || std::count(read.begin(), read.end(), "abc");
  }
  EXPECT_TRUE(readsThree && !readsSum);
  // Not when the first sum has another reader: it stays where it is, stored.
  EXPECT_EQ(labels(codegen::kernelSchedule(*parsed(threeGradients("%other, %ab")))),
            (std::vector<std::string>{"Add", "MatMul", "Neg", "Add+Cast+RmsNormGrad"}));
}

TEST(RowGroups, LayerNormStoresTheResidualSumItReads) {
  // A transformer's residual stream: the sublayer's bf16 output widened and added to the stream,
  // the sum normalized. The sum is read again (the next residual add, the backward pass), so the
  // layer norm's GPU form stores it as it reads it instead of reading it back from a kernel of
  // its own; other row ops keep such a prologue apart.
  auto g = parsed(R"(graph @g {
    input %proj : bf16[64, 64]
    input %res : f32[64, 64]
    input %w : f32[64]
    input %b : f32[64]
    %p : ?[*] = Cast(%proj) {to = "f32"}
    %h : ?[*] = Add(%res, %p)
    %y : ?[*], %mean : ?[*], %inv : ?[*] = LayerNormalization(%h, %w, %b) {axis = -1}
    %yb : ?[*] = Cast(%y) {to = "bf16"}
    %s : ?[*] = Softmax(%h) {axis = -1}
    output %yb, %h, %mean, %inv, %s
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(labels(schedule), (std::vector<std::string>{"Cast+Add+LayerNormalization+Cast", "Softmax"}));
  const auto& group = schedule[0];
  kir::RowGroup rows{{group[0], group[1]}, group[2], {group[3]}, false, {true}, true};
  auto gpu = kir::lowerRowGroupGpu("k", rows);
  ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
  ASSERT_TRUE(gpu->has_value());
  ASSERT_EQ((*gpu)->size(), 1u);
  auto [written, read] = writtenAndRead((**gpu)[0]);
  EXPECT_EQ(written, (std::vector<std::string>{"h", "yb", "mean", "inv"}));
  EXPECT_TRUE(std::count(read.begin(), read.end(), "proj") && std::count(read.begin(), read.end(), "res") && !std::count(read.begin(), read.end(), "h"));
  kir::RowGroup softmax{{group[0], group[1]}, g->findValue("s")->producer, {}, true, {}, true};
  auto apart = kir::lowerRowGroupGpu("k", softmax);
  ASSERT_TRUE(!!apart);
  EXPECT_FALSE(apart->has_value());
}

TEST(RowGroups, RmsNormStoresTheResidualSumAndItsGradientTakesNoMean) {
  // A Llama block's residual stream, normalized by RmsNorm (passes/FuseRmsNorm): as with the layer
  // norm, the sum is stored as the GPU form reads it; the gradient reads the row's 1 / rms alone.
  auto g = parsed(R"(graph @g {
    input %proj : bf16[64, 64]
    input %res : f32[64, 64]
    input %w : f32[64]
    input %dy : f32[64, 64]
    %p : ?[*] = Cast(%proj) {to = "f32"}
    %h : ?[*] = Add(%res, %p)
    %y : ?[*], %inv : ?[*] = RmsNorm(%h, %w) {axis = -1}
    %yb : ?[*] = Cast(%y) {to = "bf16"}
    %dx : ?[*], %dw : ?[*] = RmsNormGrad(%h, %w, %dy, %inv) {axis = -1}
    %dxb : ?[*] = Cast(%dx) {to = "bf16"}
    output %yb, %h, %dxb, %dw
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(labels(schedule), (std::vector<std::string>{"Cast+Add+RmsNorm+Cast", "RmsNormGrad+Cast"}));
  const auto& group = schedule[0];
  auto gpu = kir::lowerRowGroupGpu("k", kir::RowGroup{{group[0], group[1]}, group[2], {group[3]}, false, {true}, true});
  ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
  ASSERT_TRUE(gpu->has_value());
  ASSERT_EQ((*gpu)->size(), 1u);
  auto [written, read] = writtenAndRead((**gpu)[0]);
  EXPECT_EQ(written, (std::vector<std::string>{"h", "yb", "inv"}));
  const auto& back = schedule[1];
  auto grad = kir::lowerRowGroupGpu("k", kir::RowGroup{{}, back[0], {back[1]}, false, {true}});
  ASSERT_TRUE(!!grad) << errorText(grad.takeError());
  ASSERT_TRUE(grad->has_value());
  std::vector<std::string> outs, ins;
  for (const kir::Kernel& k : **grad) {
    auto [w, r] = writtenAndRead(k);
    outs.insert(outs.end(), w.begin(), w.end());
    ins.insert(ins.end(), r.begin(), r.end());
  }
  EXPECT_TRUE(std::count(outs.begin(), outs.end(), "dxb") && std::count(outs.begin(), outs.end(), "dw"));
  EXPECT_TRUE(std::count(ins.begin(), ins.end(), "inv") && std::count(ins.begin(), ins.end(), "h") && !std::count(outs.begin(), outs.end(), "dx"));
}

TEST(RowGroups, ABiasGradientMovesUpToItsGeluGradient) {
  // GPT-2's MLP backward: the GELU gradient dh is read by the data gradient's product and summed
  // into the bias gradient. The sum moves up to the GELU gradient (past the product, which reads
  // dh too), and its GPU form computes dh, stores it and sums it, so that nothing reads dh back
  // for the sum.
  auto g = parsed(R"(graph @g {
    input %h : bf16[2048, 256]
    input %d : bf16[2048, 256]
    input %w : bf16[256, 64]
    const %c : i64[1] = dense<"0x0001000000000000">
    %dh : ?[*] = UnaryGrad(%h, %d) {of = "Gelu", approximate = "none"}
    %dx : ?[*] = MatMul(%dh, %w)
    %db : ?[*] = SumTo(%dh, %c) {to = "f32"}
    output %dx, %db
  })");
  auto schedule = codegen::kernelSchedule(*g);
  EXPECT_EQ(labels(schedule), (std::vector<std::string>{"UnaryGrad+SumTo", "MatMul"}));
  kir::RowGroup rows{{schedule[0][0]}, schedule[0][1], {}, true, {}, true};
  auto gpu = kir::lowerRowGroupGpu("k", rows);
  ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
  ASSERT_TRUE(gpu->has_value());
  ASSERT_EQ((*gpu)->size(), 2u); // the zeroing, the sums
  auto [written, read] = writtenAndRead((**gpu)[1]);
  EXPECT_EQ(written, (std::vector<std::string>{"dh", "db"}));
  EXPECT_EQ(read, (std::vector<std::string>{"h", "d"}));
}


TEST(RowGroups, APrologueReadInBetweenStaysWhereItIs) {
  // The residual sum is read by a product scheduled before the layer norm: moving the sum down
  // into the layer norm's group would run the product on a sum not yet computed.
  auto g = parsed(R"(graph @g {
    input %res : f32[64, 64]
    input %p : f32[64, 64]
    input %w : f32[64]
    input %b : f32[64]
    input %m : f32[64, 64]
    %h : ?[*] = Add(%res, %p)
    %q : ?[*] = MatMul(%h, %m)
    %y : ?[*], %mean : ?[*], %inv : ?[*] = LayerNormalization(%h, %w, %b) {axis = -1}
    output %y, %q, %mean, %inv
  })");
  EXPECT_EQ(labels(codegen::kernelSchedule(*g)), (std::vector<std::string>{"Add", "MatMul", "LayerNormalization"}));
}
