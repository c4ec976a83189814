// kir::laneStep, checked against evaluating the index at every iteration: for
// the load indices of real fused kernels (a transpose, the rotary embedding's
// slices and concatenation, its gradient's SliceGrads, a transpose whose rows
// the lanes cross) and for hand-built cases that must not be called affine.
// Then the PTX of those kernels: every load and store of the vector loop
// merged into 16-byte accesses (with 4 heads, as Llama's key/value heads; at 3
// heads of 16 LLVM merges the concatenation's loads only in part).
#include "codegen/kir/Builder.h"
#include "codegen/kir/LaneStep.h"
#include "codegen/kir/Lower.h"
#include "ir/Text.h"
#include "ir/passes/InferShapes.h"
#include "tests/codegen/KernelJit.h"

#include <gtest/gtest.h>

#include <regex>

using namespace sgc;
using namespace sgc::kir;
using B = kir::Builder;

namespace {

/// An integer index expression's value with the loop variable at `i`; Within as the emitter
/// computes it for lane u of a vector loop of `width` (clamp(x - s u, 0, n - s width) + s u where
/// kir::stepsWithin holds, else a clamp).
int64_t eval(const Expr& e, int loop, int64_t i, int width) {
  auto arg = [&](int k) { return eval(*e.args[k], loop, i, width); };
  switch (e.kind) {
  case ExprKind::Const: return e.bits;
  case ExprKind::LoopVar: return e.id == loop ? i : 0;
  case ExprKind::Binary: {
    int64_t a = arg(0), b = arg(1);
    switch (e.op) {
    case KOp::Add: return a + b;
    case KOp::Sub: return a - b;
    case KOp::Mul: return a * b;
    case KOp::IDiv: return a / b;
    case KOp::IMod: return a % b;
    case KOp::Min: return std::min(a, b);
    case KOp::Max: return std::max(a, b);
    case KOp::Within: {
      LaneStep s = laneStep(*e.args[0], loop, width);
      if (!stepsWithin(s, b, width)) return std::clamp<int64_t>(a, 0, b - 1);
      int64_t u = i % width;
      return std::clamp<int64_t>(a - s.step * u, 0, b - s.step * width) + s.step * u;
    }
    default: ADD_FAILURE() << "an index op the test does not evaluate: " << kopName(e.op); return 0;
    }
  }
  default: ADD_FAILURE() << "an index the test does not evaluate"; return 0;
  }
}

/// Every load's index in `e` (loads inside indices too).
void loadIndices(const Expr& e, std::vector<const Expr*>& out) {
  if (e.kind == ExprKind::Load) out.push_back(e.args[0].get());
  for (const ExprRef& a : e.args) loadIndices(*a, out);
}

/// Checks laneStep's claims on every load and store index of elementwise kernel `k` at every
/// iteration; returns how many indices were not affine (-1 at the first wrong claim).
int checkIndices(const Kernel& k, int width) {
  const Stmt& top = *k.body;
  std::vector<const Expr*> indices;
  for (const StmtRef& st : top.body) {
    indices.push_back(st->index.get());
    loadIndices(*st->value, indices);
  }
  int other = 0;
  for (const Expr* index : indices) {
    LaneStep s = laneStep(*index, top.id, width);
    if (!s.affine) {
      ++other;
      continue;
    }
    for (int64_t base = 0; base < top.extent; base += width) {
      int64_t zero = eval(*index, top.id, base, width);
      if (s.divisor) EXPECT_EQ(zero % s.divisor, 0) << "iteration " << base;
      else EXPECT_EQ(zero, 0) << "iteration " << base;
      for (int u = 1; u < width; ++u)
        if (eval(*index, top.id, base + u, width) != zero + s.step * u) {
          ADD_FAILURE() << "iteration " << base << " lane " << u << "\n" << print(k);
          return -1;
        }
    }
  }
  return other;
}

std::unique_ptr<ir::Graph> parsed(const std::string& text) {
  auto g = ir::parse(text, "lanes");
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  Error e = ir::inferShapes(**g, false);
  EXPECT_FALSE(!!e) << errorText(std::move(e));
  return std::move(*g);
}

/// The graph's nodes as one fused kernel storing its outputs.
Kernel fused(const ir::Graph& g) {
  std::vector<const ir::Node*> group;
  for (const auto& n : g.nodes()) group.push_back(n.get());
  auto k = lowerElementwise("k", group);
  EXPECT_TRUE(!!k) << errorText(k.takeError());
  return std::move(*k);
}

// The rotary embedding as exporters write it, on bf16 heads of 16 (Llama's, smaller).
const char* kRotary = R"(graph @g {
  input %x : bf16[2, 4, 4, 16]
  input %cos : f32[4, 16]
  input %sin : f32[4, 16]
  const %ax : i64[1] = dense<"0x0300000000000000">
  const %s0 : i64[1] = dense<"0x0000000000000000">
  const %s8 : i64[1] = dense<"0x0800000000000000">
  const %s16 : i64[1] = dense<"0x1000000000000000">
  %f : ?[*] = Cast(%x) {to = "f32"}
  %t : ?[*] = Transpose(%f) {perm = [0, 2, 1, 3]}
  %hi : ?[*] = Slice(%t, %s8, %s16, %ax)
  %n : ?[*] = Neg(%hi)
  %lo : ?[*] = Slice(%t, %s0, %s8, %ax)
  %r : ?[*] = Concat(%n, %lo) {axis = 3}
  %a : ?[*] = Mul(%t, %cos)
  %b : ?[*] = Mul(%r, %sin)
  %s : ?[*] = Add(%a, %b)
  %y : ?[*] = Cast(%s) {to = "bf16"}
  output %y
})";

// Its gradient's slices back into place, then the heads transposed back (f32 in, bf16 out).
const char* kRotaryGrad = R"(graph @g {
  input %dy : f32[2, 4, 4, 16]
  const %ax : i64[1] = dense<"0x0300000000000000">
  const %s0 : i64[1] = dense<"0x0000000000000000">
  const %s8 : i64[1] = dense<"0x0800000000000000">
  const %s16 : i64[1] = dense<"0x1000000000000000">
  const %one : i64[1] = dense<"0x0100000000000000">
  const %shape : i64[4] = dense<"0x0200000000000000040000000000000004000000000000001000000000000000">
  %hi : ?[*] = Slice(%dy, %s8, %s16, %ax)
  %lo : ?[*] = Slice(%dy, %s0, %s8, %ax)
  %ghi : ?[*] = SliceGrad(%hi, %shape, %s8, %s16, %ax, %one)
  %glo : ?[*] = SliceGrad(%lo, %shape, %s0, %s8, %ax, %one)
  %g : ?[*] = Add(%ghi, %glo)
  %t : ?[*] = Transpose(%g) {perm = [0, 2, 1, 3]}
  %y : ?[*] = Cast(%t) {to = "bf16"}
  output %y
})";

// A transpose whose rows (3) the lanes (2) cross: its load index does not step by a constant.
const char* kOddTranspose = R"(graph @g {
  input %x : f32[3, 10]
  %y : ?[*] = Transpose(%x) {perm = [1, 0]}
  output %y
})";

/// The loads and stores of `ptx`'s kernel that move one element (not merged).
int scalarAccesses(const std::string& ptx) {
  std::regex scalar(R"((ld|st)\.global\.(u16|b16|f32|b32|u32)\s)");
  return (int)std::distance(std::sregex_iterator(ptx.begin(), ptx.end(), scalar), std::sregex_iterator());
}

} // namespace

TEST(LaneStep, TheIterationAndItsTransposes) {
  ExprRef i = loopVar(0);
  auto step = [](const ExprRef& e) { return laneStep(*e, 0, 8); };
  EXPECT_TRUE(step(i).affine);
  EXPECT_EQ(step(i).step, 1);
  // (i / 128 % 2048) * 128 + i % 128: step 1. i / 1 = i, i % 1 = 0.
  ExprRef t = B::add(B::mul(binary(KOp::IMod, binary(KOp::IDiv, i, B::i(128)), B::i(2048)), B::i(128)), binary(KOp::IMod, i, B::i(128)));
  EXPECT_EQ(step(t).step, 1);
  EXPECT_EQ(step(binary(KOp::IDiv, i, B::i(1))).step, 1);
  EXPECT_EQ(step(binary(KOp::IMod, i, B::i(1))).step, 0);
  // A column of a row-major matrix: 2 i, then i % 100 (8 lanes may cross a row of 100).
  EXPECT_EQ(step(B::mul(i, B::i(2))).step, 2);
  EXPECT_FALSE(step(binary(KOp::IMod, i, B::i(100))).affine);
  EXPECT_FALSE(step(binary(KOp::IDiv, i, B::i(4))).affine);
  // A clamp is not affine; Within is, where the lanes are all in range or all out.
  EXPECT_FALSE(step(B::clamp(binary(KOp::IMod, i, B::i(128)), 64)).affine);
  EXPECT_TRUE(step(B::within(B::sub(binary(KOp::IMod, i, B::i(128)), B::i(64)), 64)).affine);
  EXPECT_FALSE(step(B::within(B::sub(binary(KOp::IMod, i, B::i(128)), B::i(60)), 64)).affine);
  // A gather's index moves with the loaded values.
  ExprRef gathered = std::make_shared<Expr>(Expr{ExprKind::Load, Scalar::I64, 0, 0, 0, KOp::Add, {i}});
  EXPECT_FALSE(step(gathered).affine);
  EXPECT_EQ(step(B::add(B::i(5), B::i(7))).step, 0);
}

TEST(LaneStep, RealKernelsIndicesMoveAsClaimed) {
  // 16 bytes of the widest streamed element: bf16 in and out (cos and sin broadcast) 8 a thread,
  // f32 in 4.
  for (auto [text, want] : {std::pair{kRotary, 8}, std::pair{kRotaryGrad, 4}}) {
    auto g = parsed(text);
    Kernel k = fused(*g);
    int width = vectorWidthFor(k);
    ASSERT_EQ(width, want) << print(k);
    EXPECT_EQ(checkIndices(k, width), 0) << print(k); // every index steps by a constant
  }
  auto g = parsed(kOddTranspose);
  Kernel k = fused(*g);
  ASSERT_EQ(vectorWidthFor(k), 2);
  EXPECT_EQ(checkIndices(k, 2), 1) << print(k); // the store's steps, the load's does not
}

TEST(LaneStep, MovementKernelsAccessMemoryInVectors) {
  for (const char* text : {kRotary, kRotaryGrad}) {
    auto g = parsed(text);
    auto ptx = test::sm90Ptx({fused(*g)});
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    EXPECT_EQ(scalarAccesses(*ptx), 0) << *ptx;
    EXPECT_NE(ptx->find("ld.global.v4"), std::string::npos);
  }
}
