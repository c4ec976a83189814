// Kernels lowered from IR nodes and compiled by LLVM compute what the
// reference interpreter computes: each case is JIT-compiled for the CPU and
// run on random inputs; the same kernels' PTX assembles with ptxas for sm_90
// and sm_80 (SKIP when the CUDA toolkit is absent).
#include "codegen/kir/Builder.h"
#include "tests/codegen/KernelJit.h"
#include "codegen/kir/Lower.h"
#include "codegen/kir/LowerOps.h"
#include "codegen/llvm/Emitter.h"
#include "ir/Text.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/InferShapes.h"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <random>

using namespace sgc;
using namespace sgc::test;

namespace {

struct Case {
  std::string name, ir; ///< a graph whose nodes form one elementwise group, or one reduction
  double tol = 1e-6;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  auto unary = [](const char* op, const char* attrs = "") {
    return Case{op, std::string("graph @g { input %x : f32[3, 5]\n %y : ?[*] = ") + op + "(%x)" + attrs + "\n output %y }"};
  };
  std::vector<Case> cs = {unary("Neg"), unary("Abs"), unary("Exp"), unary("Tanh"), unary("Erf"), unary("Sigmoid"),
                          unary("Relu"), unary("LeakyRelu", " {alpha = 0.2}"), unary("Gelu"),
                          unary("Gelu", " {approximate = \"tanh\"}")};
  cs[6].name = "Relu";
  cs.back().name = "GeluTanh";
  cs.push_back({"LogSqrt", "graph @g { input %x : f32[4, 4]\n %a : ?[*] = Abs(%x)\n %l : ?[*] = Log(%a)\n %s : ?[*] = Sqrt(%a)\n %y : ?[*] = Add(%l, %s)\n output %y }"});
  cs.push_back({"AddBroadcast", "graph @g { input %a : f32[3, 5]\n input %b : f32[5]\n %y : ?[*] = Add(%a, %b)\n output %y }"});
  cs.push_back({"MulOuter", "graph @g { input %a : f32[3, 1]\n input %b : f32[1, 5]\n %y : ?[*] = Mul(%a, %b)\n output %y }"});
  cs.push_back({"DivSubF64", "graph @g { input %a : f64[2, 3]\n input %b : f64[2, 3]\n %d : ?[*] = Div(%a, %b)\n %y : ?[*] = Sub(%d, %a)\n output %y }", 1e-12});
  cs.push_back({"PowMinMax", "graph @g { input %a : f32[6]\n input %b : f32[6]\n %p : ?[*] = Abs(%a)\n %q : ?[*] = Pow(%p, %b)\n %m : ?[*] = Max(%q, %b)\n %y : ?[*] = Min(%m, %a)\n output %y }", 1e-5});
  cs.push_back({"CompareWhere", "graph @g { input %a : f32[4, 3]\n input %b : f32[3]\n %c : ?[*] = Less(%a, %b)\n %y : ?[*] = Where(%c, %a, %b)\n output %y }"});
  cs.push_back({"CompareToBool", "graph @g { input %a : f32[7]\n input %b : f32[7]\n %y : ?[*] = GreaterOrEqual(%a, %b)\n output %y }"});
  cs.push_back({"NarrowFloats", "graph @g { input %a : f32[4, 8]\n %b : ?[*] = Cast(%a) {to = \"bf16\"}\n %m : ?[*] = Mul(%b, %b)\n %h : ?[*] = Cast(%m) {to = \"f16\"}\n %y : ?[*] = Cast(%h) {to = \"f32\"}\n output %y }", 0});
  cs.push_back({"GeluGradChain", "graph @g { input %x : f32[4, 8]\n input %g : bf16[4, 8]\n %c : ?[*] = Cast(%g) {to = \"f32\"}\n"
                " %d : ?[*] = UnaryGrad(%x, %c) {of = \"Gelu\"}\n %y : ?[*] = Cast(%d) {to = \"bf16\"}\n output %y }", 1e-2});
  cs.push_back({"TanhGradFused", "graph @g { input %x : f32[3, 5]\n input %g : f32[3, 5]\n %d : ?[*] = UnaryGrad(%x, %g) {of = \"Tanh\"}\n"
                " %y : ?[*] = Neg(%d)\n output %y }"});
  cs.push_back({"Bf16Output", "graph @g { input %a : f32[6]\n %y : ?[*] = Cast(%a) {to = \"bf16\"}\n output %y }", 0});
  cs.push_back({"CastRoundTrip", "graph @g { input %a : f32[5]\n %i : ?[*] = Cast(%a) {to = \"i64\"}\n %y : ?[*] = Cast(%i) {to = \"f32\"}\n output %y }"});
  // A grouped-query attention's key gradient: each of 2 x 3 results sums 4 heads' (unrolled).
  cs.push_back({"SumToMiddleAxis", "graph @g { input %x : f32[2, 4, 3, 5]\n"
                " const %s : i64[4] = dense<\"0x0200000000000000010000000000000003000000000000000500000000000000\">\n"
                " %y : ?[*] = SumTo(%x, %s)\n output %y }", 1e-6});
  cs.push_back({"ClipScalars", "graph @g { input %a : f32[8]\n const %lo : f32[] = dense<\"0x000000bf\">\n const %hi : f32[] = dense<\"0x0000003f\">\n %y : ?[*] = Clip(%a, %lo, %hi)\n output %y }"});
  // The GELU pattern PyTorch exports: five nodes, one kernel.
  cs.push_back({"FusedGeluPattern", "graph @g { input %x : f32[2, 8]\n const %r2 : f32[] = dense<\"0xf304b53f\">\n const %one : f32[] = dense<\"0x0000803f\">\n const %half : f32[] = dense<\"0x0000003f\">\n"
                                    " %d : ?[*] = Div(%x, %r2)\n %e : ?[*] = Erf(%d)\n %a : ?[*] = Add(%e, %one)\n %m : ?[*] = Mul(%x, %a)\n %y : ?[*] = Mul(%m, %half)\n output %y }"});
  // Data movement fused into its reader: the rotary embedding as exporters write it (a transpose
  // to [B, H, T, D], the halves' negation and concatenation, the products with cos and sin).
  const std::string halves = " const %s0 : i64[1] = dense<\"0x0000000000000000\">\n const %s4 : i64[1] = dense<\"0x0400000000000000\">\n"
                             " const %s8 : i64[1] = dense<\"0x0800000000000000\">\n const %ax : i64[1] = dense<\"0x0300000000000000\">\n";
  cs.push_back({"RotaryMovements", "graph @g { input %x : f32[2, 3, 4, 8]\n input %cos : f32[3, 8]\n input %sin : f32[3, 8]\n" + halves +
                " %t : ?[*] = Transpose(%x) {perm = [0, 2, 1, 3]}\n %hi : ?[*] = Slice(%t, %s4, %s8, %ax)\n %n : ?[*] = Neg(%hi)\n"
                " %lo : ?[*] = Slice(%t, %s0, %s4, %ax)\n %r : ?[*] = Concat(%n, %lo) {axis = 3}\n %a : ?[*] = Mul(%t, %cos)\n"
                " %b : ?[*] = Mul(%r, %sin)\n %y : ?[*] = Add(%a, %b)\n output %y }"});
  // Its gradient's shape: two halves put back in place (SliceGrad), added, transposed back and flattened.
  cs.push_back({"SliceGradTransposeBack", "graph @g { input %g : f32[2, 4, 3, 4]\n input %h : f32[2, 4, 3, 4]\n" + halves +
                " const %shape : i64[4] = dense<\"0x0200000000000000040000000000000003000000000000000800000000000000\">\n"
                " const %flat : i64[3] = dense<\"0x020000000000000003000000000000002000000000000000\">\n"
                " %p : ?[*] = SliceGrad(%g, %shape, %s4, %s8, %ax)\n %n : ?[*] = Neg(%h)\n %q : ?[*] = SliceGrad(%n, %shape, %s0, %s4, %ax)\n"
                " %s : ?[*] = Add(%p, %q)\n %t : ?[*] = Transpose(%s) {perm = [0, 2, 1, 3]}\n %r : ?[*] = Reshape(%t, %flat)\n"
                " %y : ?[*] = Cast(%r) {to = \"bf16\"}\n output %y }", 0});
  // Grouped-query heads repeated for attention: each key head read by three query heads.
  cs.push_back({"RepeatedHeads", "graph @g { input %k : f32[2, 2, 3, 4]\n const %one : i64[1] = dense<\"0x0200000000000000\">\n"
                " const %e : i64[5] = dense<\"0x02000000000000000200000000000000030000000000000003000000000000000400000000000000\">\n"
                " const %heads : i64[4] = dense<\"0x0200000000000000060000000000000003000000000000000400000000000000\">\n"
                " %u : ?[*] = Unsqueeze(%k, %one)\n %x : ?[*] = Expand(%u, %e)\n %r : ?[*] = Reshape(%x, %heads)\n %y : ?[*] = Exp(%r)\n output %y }"});
  auto reduce = [](const char* name, const char* op, const char* shape, const char* axes, int keep) {
    return Case{name, std::string("graph @g { input %x : f32") + shape + "\n const %ax : i64[" + std::to_string(std::string(axes).size() / 16) +
                          "] = dense<\"0x" + axes + "\">\n %y : ?[*] = " + op + "(%x, %ax) {keepdims = " + std::to_string(keep) + "}\n output %y }",
                1e-5};
  };
  cs.push_back(reduce("ReduceSumAxis1", "ReduceSum", "[3, 4, 5]", "0100000000000000", 1));
  cs.push_back(reduce("ReduceMeanAxes02", "ReduceMean", "[3, 4, 5]", "00000000000000000200000000000000", 0));
  cs.push_back(reduce("ReduceMaxLast", "ReduceMax", "[6, 7]", "ffffffffffffffff", 0));
  cs.push_back(reduce("ReduceMinFirst", "ReduceMin", "[6, 7]", "0000000000000000", 1));
  cs.push_back(reduce("ReduceL2", "ReduceL2", "[2, 9]", "0100000000000000", 0));
  cs.push_back(reduce("ReduceSumSquare", "ReduceSumSquare", "[2, 9]", "0100000000000000", 1));
  return cs;
}

/// Lowers the graph's nodes: one reduction kernel, or one fused elementwise kernel.
kir::Kernel lower(const ir::Graph& g) {
  std::vector<const ir::Node*> nodes;
  for (auto& n : g.nodes()) nodes.push_back(n.get());
  if (nodes.size() == 1 && !kir::isFusibleElementwise(*nodes[0])) {
    auto ks = kir::lowerNode("k", *nodes[0]);
    EXPECT_TRUE(ks && ks->size() == 1) << (ks ? "not one kernel" : errorText(ks.takeError()));
    return ks && ks->size() == 1 ? std::move(ks->front()) : kir::Kernel{};
  }
  auto k = kir::lowerElementwise("k", nodes);
  EXPECT_TRUE(!!k) << errorText(k.takeError());
  return k ? std::move(*k) : kir::Kernel{};
}

std::unique_ptr<ir::Graph> parsed(const Case& c) {
  auto g = ir::parse(c.ir, c.name);
  EXPECT_TRUE(!!g) << errorText(g.takeError());
  EXPECT_FALSE(ir::inferShapes(**g, false));
  return std::move(*g);
}

class KernelCheck : public ::testing::TestWithParam<Case> {};

TEST_P(KernelCheck, CpuMatchesInterpreter) {
  auto g = parsed(GetParam());
  kir::Kernel k = lower(*g);
  ASSERT_TRUE(k.body) << "lowering failed";
  auto inputs = randomInputs(*g, 3, -2, 2);
  auto want = ir::run(*g, inputs);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  // Buffers of the kernel, by value name: inputs and constants from the graph, the output fresh.
  std::vector<ir::Tensor> storage;
  storage.reserve(k.buffers.size());
  for (const kir::BufferArg& b : k.buffers) {
    const ir::Value* v = g->findValue(b.name);
    if (b.written) storage.emplace_back(b.dtype, v->type.shape());
    else storage.push_back(v->kind == ir::ValueKind::Input ? inputs.at(b.name) : *v->data);
  }
  std::vector<void*> args;
  for (auto& t : storage) args.push_back(t.bytes.data());
  Jit jit({k});
  auto fn = jit.fn("k");
  ASSERT_TRUE(fn);
  int64_t extent = k.body->extent;
  fn(args.data(), 0, extent / 2); // two calls, as a thread pool would split the work
  fn(args.data(), extent / 2, extent);

  const ir::Tensor& out = storage.back();
  const ir::Tensor& ref = want->at(g->outputs[0]->name);
  ASSERT_EQ(out.shape, ref.shape);
  for (int64_t i = 0; i < ref.numel(); ++i)
    EXPECT_NEAR(out.getF(i), ref.getF(i), GetParam().tol * (1 + std::fabs(ref.getF(i)))) << "element " << i << "\n" << kir::print(k);
}

TEST_P(KernelCheck, PtxAssembles) {
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
  auto g = parsed(GetParam());
  kir::Kernel k = lower(*g);
  ASSERT_TRUE(k.body);
  for (const char* sm : {"sm_90", "sm_80"}) {
    llvm::LLVMContext ctx;
    auto spec = codegen::TargetSpec::nvptx(sm);
    auto mod = codegen::emitKernels(ctx, {k}, spec);
    ASSERT_TRUE(!!mod) << errorText(mod.takeError());
    auto ptx = codegen::compileModule(**mod, spec);
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    ASSERT_NE(ptx->find(".entry k"), std::string::npos) << *ptx;
    auto dir = std::filesystem::temp_directory_path() / ("sgc-ptx-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "k.ptx") << *ptx;
    std::string cmd = std::string(ptxas) + " -arch=" + spec.cpu + " " + (dir / "k.ptx").string() + " -o " + (dir / "k.cubin").string() + " 2>&1";
    int rc = std::system(cmd.c_str());
    std::filesystem::remove_all(dir);
    EXPECT_EQ(rc, 0) << sm << "\n" << *ptx;
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelCheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(Kernel, ProductWithEpilogueMatchesInterpreter) {
  // Gemm with bias (transB, as Linear layers export), then GELU's erf pattern and a scale: one kernel.
  auto g = ir::parse(R"(graph @g {
    input %x : f32[5, 7]
    input %w : f32[6, 7]
    input %bias : f32[6]
    const %r2 : f32[] = dense<"0xf304b53f">
    const %one : f32[] = dense<"0x0000803f">
    %h : ?[*] = Gemm(%x, %w, %bias) {transB = 1}
    %d : ?[*] = Div(%h, %r2)
    %e : ?[*] = Erf(%d)
    %a : ?[*] = Add(%e, %one)
    %y : ?[*] = Mul(%h, %a)
    output %y })", "epilogue");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  std::vector<const ir::Node*> group;
  for (auto& n : (*g)->nodes()) group.push_back(n.get());
  for (int transB : {1, 0}) {
    if (!transB) { // the same with a plain right operand: the row-accumulating form
      group[0]->inputs[1]->type = ir::Type::of(ir::DType::F32, {7, 6});
      const_cast<ir::Node*>(group[0])->attrs["transB"] = int64_t(0);
    }
    auto ks = kir::lowerProductGroup("k", group);
    ASSERT_TRUE(!!ks) << errorText(ks.takeError());
    ASSERT_EQ(ks->size(), 1u);
    auto in = randomInputs(**g, 5, -1, 1);
    auto want = ir::run(**g, in);
    ASSERT_TRUE(!!want) << errorText(want.takeError());
    std::vector<ir::Tensor> storage;
    storage.reserve(8);
    std::vector<void*> args;
    for (const kir::BufferArg& b : (*ks)[0].buffers) {
      const ir::Value* v = (*g)->findValue(b.name);
      storage.push_back(b.written ? ir::Tensor(b.dtype, v->type.shape()) : v->kind == ir::ValueKind::Input ? in.at(b.name) : *v->data);
      args.push_back(storage.back().bytes.data());
    }
    Jit jit(*ks);
    auto fn = jit.fn("k");
    ASSERT_TRUE(fn);
    fn(args.data(), 0, (*ks)[0].body->extent);
    const ir::Tensor& ref = want->at("y");
    const ir::Tensor& out = storage[std::find_if((*ks)[0].buffers.begin(), (*ks)[0].buffers.end(), [](auto& b) { return b.written; }) - (*ks)[0].buffers.begin()];
    for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(out.getF(i), ref.getF(i), 1e-5 * (1 + std::fabs(ref.getF(i)))) << "transB " << transB;
  }
}

TEST(Kernel, ObjectCodeIsDeterministic) {
  auto g = parsed(cases()[0]);
  kir::Kernel k = lower(*g);
  auto compile = [&] {
    llvm::LLVMContext ctx;
    auto mod = codegen::emitKernels(ctx, {k}, codegen::TargetSpec::x86());
    EXPECT_TRUE(!!mod);
    auto obj = codegen::compileModule(**mod, codegen::TargetSpec::x86());
    EXPECT_TRUE(!!obj);
    return *obj;
  };
  std::string a = compile(), b = compile();
  ASSERT_GT(a.size(), 4u);
  EXPECT_EQ(a.substr(0, 4), "\x7f" "ELF");
  EXPECT_EQ(a, b);
}

TEST(Kernel, FusionIsOneLoop) {
  auto all = cases();
  auto it = std::find_if(all.begin(), all.end(), [](const Case& c) { return c.name == "FusedGeluPattern"; });
  ASSERT_NE(it, all.end());
  auto g = parsed(*it);
  kir::Kernel k = lower(*g);
  // x, three constants, the output; one parallel loop with one store.
  EXPECT_EQ(k.buffers.size(), 5u);
  EXPECT_EQ(kir::print(k).find("for i1"), std::string::npos);
}

} // namespace

namespace {

/// y = op(a) op(b) for each matrix of the batch, as GemmShape describes it (what cuBLASLt is asked to do).
void referenceGemm(const kir::GemmShape& s, const ir::Tensor& a, const ir::Tensor& b, ir::Tensor& y) {
  for (int64_t q = 0; q < s.batch; ++q)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0;
        for (int64_t k = 0; k < s.k; ++k)
          sum += a.getF(q * s.strideA + (s.transA ? k * s.m + i : i * s.k + k)) * b.getF(q * s.strideB + (s.transB ? j * s.k + k : k * s.n + j));
        y.setF(q * s.m * s.n + i * s.n + j, sum);
      }
}

} // namespace

TEST(Kernel, GemmShapeAndEpilogueMatchInterpreter) {
  // The GPU form of a product group: the GEMM its GemmShape describes, then the epilogue kernel in
  // place; also with the batch folded into rows where b is shared (foldedM: the rows then, or 0).
  struct {
    const char* ir;
    int64_t m, n, k, batch, strideA, strideB, foldedM;
  } cases[] = {
      {R"(graph @g { input %x : f32[5, 7]
    input %w : f32[6, 7]
    input %bias : f32[6]
    const %one : f32[] = dense<"0x0000803f">
    %h : ?[*] = Gemm(%x, %w, %bias) {transB = 1, alpha = 0.5}
    %e : ?[*] = Erf(%h)
    %y : ?[*] = Add(%e, %one)
    output %y })", 5, 6, 7, 1, 0, 0, 0},
      {R"(graph @g { input %x : f32[7, 5]
    input %w : f32[7, 6]
    %y : ?[*] = Gemm(%x, %w) {transA = 1}
    output %y })", 5, 6, 7, 1, 0, 0, 0},
      {R"(graph @g { input %x : f32[2, 3, 4, 5]
    input %w : f32[5, 6]
    input %r : f32[2, 3, 4, 6]
    %h : ?[*] = MatMul(%x, %w)
    %y : ?[*] = Add(%r, %h)
    output %y })", 4, 6, 5, 6, 20, 0, 24},
      {R"(graph @g { input %q : f32[2, 3, 4, 5]
    input %k : f32[2, 3, 5, 4]
    %y : ?[*] = MatMul(%q, %k)
    output %y })", 4, 4, 5, 6, 20, 20, 0},
  };
  for (auto& c : cases) {
    auto g = ir::parse(c.ir, "gemm");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    std::vector<const ir::Node*> group;
    for (auto& n : (*g)->nodes()) group.push_back(n.get());
    auto shape = kir::gemmShape(group);
    ASSERT_TRUE(shape.has_value()) << c.ir;
    EXPECT_EQ(std::vector<int64_t>({shape->m, shape->n, shape->k, shape->batch, shape->strideA, shape->strideB}),
              std::vector<int64_t>({c.m, c.n, c.k, c.batch, c.strideA, c.strideB}));
    kir::GemmShape folded = *shape;
    kir::foldBatchIntoRows(folded);
    EXPECT_EQ(std::vector<int64_t>({folded.m, folded.batch}), c.foldedM ? std::vector<int64_t>({c.foldedM, 1}) : std::vector<int64_t>({c.m, c.batch}));
    auto in = randomInputs(**g, 7, -1, 1);
    auto want = ir::run(**g, in);
    ASSERT_TRUE(!!want) << errorText(want.takeError());
    auto epilogue = kir::lowerProductEpilogue("k", group);
    ASSERT_TRUE(!!epilogue) << errorText(epilogue.takeError());
    ASSERT_EQ(epilogue->has_value(), group.size() > 1 || group[0]->inputs.size() > 2);
    for (const kir::GemmShape& gemm : {*shape, folded}) {
      ir::Tensor y(ir::DType::F32, shape->y->type.shape());
      referenceGemm(gemm, in.at(shape->a->name), in.at(shape->b->name), y);
      if (*epilogue) {
        std::vector<void*> args;
        for (const kir::BufferArg& b : (**epilogue).buffers) {
          ir::Value* v = (*g)->findValue(b.name);
          args.push_back(b.written ? y.bytes.data() : v->kind == ir::ValueKind::Input ? in.at(b.name).bytes.data() : const_cast<uint8_t*>(v->data->bytes.data()));
        }
        Jit jit({**epilogue});
        auto fn = jit.fn("k");
        ASSERT_TRUE(fn);
        fn(args.data(), 0, (**epilogue).body->extent);
      }
      const ir::Tensor& ref = want->at("y");
      for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(y.getF(i), ref.getF(i), 1e-5 * (1 + std::fabs(ref.getF(i)))) << c.ir;
    }
  }
  // A batch broadcast over part of the dims is no strided batch: the product stays on our kernel.
  auto g = ir::parse("graph @g { input %a : f32[2, 1, 4, 5]\n input %b : f32[1, 3, 5, 6]\n %y : ?[*] = MatMul(%a, %b)\n output %y }", "b");
  ASSERT_TRUE(!!g);
  ASSERT_FALSE(ir::inferShapes(**g, false));
  EXPECT_FALSE(kir::gemmShape({(*g)->nodes()[0].get()}).has_value());
}

TEST(Kernel, LossWithGradientMatchesInterpreter) {
  // SceLossGrad giving the loss too (passes/FuseLossGrad), in its CPU form: the loss's serial
  // kernel, then the gradient's, against the interpreter.
  const char* text = "graph @g { input %x : bf16[6, 5]\n input %seed : f32[]\n"
                     " const %t : i64[6] = dense<\"0x01000000000000009cffffffffffffff0400000000000000000000000000000003000000000000000200000000000000\">\n"
                     " %ds : ?[*], %l : ?[*] = SceLossGrad(%x, %t, %seed) {ignore_index = -100, to = \"f32\"}\n output %ds, %l }";
  auto g = ir::parse(text, "loss");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  const ir::Node& n = *(*g)->nodes()[0];
  ASSERT_EQ(n.outputs[1]->type, ir::Type::of(ir::DType::F32, {}));
  auto in = randomInputs(**g, 11, -1, 1);
  in.at("seed").setF(0, 0.75);
  auto want = ir::run(**g, in);
  ASSERT_TRUE(!!want) << errorText(want.takeError());
  auto ks = kir::lowerNode("k", n);
  ASSERT_TRUE(!!ks) << errorText(ks.takeError());
  ASSERT_EQ(ks->size(), 2u);
  std::map<std::string, ir::Tensor> buffers = in;
  for (const ir::Value* v : n.outputs) buffers.emplace(v->name, ir::Tensor(v->type.dtype, v->type.shape()));
  buffers.emplace("t", *(*g)->findValue("t")->data);
  Jit jit(*ks);
  for (const kir::Kernel& k : *ks) {
    std::vector<void*> args;
    for (const kir::BufferArg& b : k.buffers) args.push_back(buffers.at(b.name).bytes.data());
    auto fn = jit.fn(k.name);
    ASSERT_TRUE(fn);
    fn(args.data(), 0, k.body->extent);
  }
  for (const char* v : {"ds", "l"}) {
    const ir::Tensor &got = buffers.at(v), &ref = want->at(v);
    for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(got.getF(i), ref.getF(i), 1e-2 * (1 + std::fabs(ref.getF(i)))) << "%" << v << "[" << i << "]";
  }
}

TEST(Kernel, GpuFormsMatchInterpreter) {
  // The GPU forms (chunks of work meeting in atomic adds), run here on the CPU in two halves as
  // two thread-pool workers would, against the interpreter. (Sums over the last dims take a warp
  // per span of a row, which a CPU cannot run: KernelCheck.PtxAssembles, the GPU bundle.)
  const char* graphs[] = {
      "graph @g { input %x : f32[2048, 8]\n const %s : i64[1] = dense<\"0x0800000000000000\">\n %y : ?[*] = SumTo(%x, %s)\n output %y }",
      "graph @g { input %x : bf16[2048, 8]\n const %s : i64[1] = dense<\"0x0800000000000000\">\n %y : ?[*] = SumTo(%x, %s) {to = \"f32\"}\n output %y }",
      // a bias gradient over two leading dims
      "graph @g { input %x : bf16[4, 512, 24]\n const %s : i64[1] = dense<\"0x1800000000000000\">\n %y : ?[*] = SumTo(%x, %s) {to = \"f32\"}\n output %y }",
      "graph @g { input %x : f32[2048, 4]\n const %ax : i64[1] = dense<\"0x0000000000000000\">\n %y : ?[*] = ReduceMean(%x, %ax) {keepdims = 0}\n output %y }",
      "graph @g { input %x : f32[1024, 3]\n const %ax : i64[1] = dense<\"0x0000000000000000\">\n %y : ?[*] = ReduceSum(%x, %ax)\n output %y }",
      "graph @g { input %dy : f32[2, 6, 3]\n const %i : i64[6] = dense<\"0x0100000000000000ffffffffffffffff0100000000000000000000000000000002000000000000000100000000000000\">\n"
      " const %s : i64[3] = dense<\"0x020000000000000004000000000000000300000000000000\">\n %y : ?[*] = GatherGrad(%dy, %i, %s) {axis = 1}\n output %y }",
      "graph @g { input %x : f32[6, 5]\n const %t : i64[6] = dense<\"0x01000000000000009cffffffffffffff0400000000000000000000000000000003000000000000000200000000000000\">\n"
      " %y : ?[*] = SoftmaxCrossEntropyLoss(%x, %t) {ignore_index = -100}\n output %y }",
      "graph @g { input %x : bf16[6, 5]\n const %t : i64[6] = dense<\"0x01000000000000009cffffffffffffff0400000000000000000000000000000003000000000000000200000000000000\">\n"
      " %y : ?[*] = SoftmaxCrossEntropyLoss(%x, %t) {ignore_index = -100, to = \"f32\"}\n output %y }",
  };
  for (const char* text : graphs) {
    auto g = ir::parse(text, "gpu");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    const ir::Node& n = *(*g)->nodes()[0];
    auto gpu = kir::lowerForGpu("k", n);
    ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
    ASSERT_TRUE(gpu->has_value()) << text;
    auto in = randomInputs(**g, 11, -1, 1);
    auto want = ir::run(**g, in);
    ASSERT_TRUE(!!want) << errorText(want.takeError());
    ir::Tensor y(ir::DType::F32, n.outputs[0]->type.shape());
    for (int64_t i = 0; i < y.numel(); ++i) y.setF(i, 12345); // the zeroing kernel must clear it
    Jit jit(**gpu);
    for (const kir::Kernel& k : **gpu) {
      std::vector<void*> args;
      for (const kir::BufferArg& b : k.buffers) {
        ir::Value* v = (*g)->findValue(b.name);
        args.push_back(b.written ? y.bytes.data() : v->kind == ir::ValueKind::Input ? in.at(b.name).bytes.data() : const_cast<uint8_t*>(v->data->bytes.data()));
      }
      auto fn = jit.fn(k.name);
      ASSERT_TRUE(fn);
      ASSERT_FALSE(kir::isSerial(k)) << k.name;
      fn(args.data(), 0, k.body->extent / 2);
      fn(args.data(), k.body->extent / 2, k.body->extent);
    }
    const ir::Tensor& ref = want->at("y");
    ASSERT_EQ(y.numel(), ref.numel());
    for (int64_t i = 0; i < ref.numel(); ++i) EXPECT_NEAR(y.getF(i), ref.getF(i), 1e-4 * (1 + std::fabs(ref.getF(i)))) << text;
  }
}

TEST(Kernel, LongRowLossGradientIsABlockPerRow) {
  // An LM head's loss gradient (10,000 classes) takes a GPU block of 512 threads a row, its
  // warps' partial maximum, sum and weight total meeting in shared memory; rows of 128 keep a warp
  // each. Its loads and stores move 16 bytes, it fits the 64 registers of two such blocks an SM, and the
  // loss total is zeroed first. The numbers are checked on the device (tests/gpu/check_gpu.sh:
  // vocab and vocab_bf16 against the CPU).
  for (int64_t classes : {10000, 128}) {
    std::string text = "graph @g { input %x : bf16[64, " + std::to_string(classes) + "]\n input %t : i64[64]\n input %seed : f32[]\n" +
                       " %ds : ?[*], %l : ?[*] = SceLossGrad(%x, %t, %seed) {ignore_index = -100, to = \"f32\"}\n output %ds, %l }";
    SCOPED_TRACE(text);
    auto g = ir::parse(text, "loss");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    auto gpu = kir::lowerForGpu("k", *(*g)->nodes()[0]);
    ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
    ASSERT_TRUE(gpu->has_value());
    ASSERT_EQ((*gpu)->size(), 2u); // the loss total's zeroing, then the rows
    const kir::Kernel& k = (*gpu)->back();
    if (classes == 128) {
      EXPECT_TRUE(k.shared.empty());
      EXPECT_NE(k.threads, 512);
      continue;
    }
    EXPECT_EQ(k.threads, 512);
    EXPECT_EQ(k.body->extent, 64 * 512);
    EXPECT_EQ(k.shared.size(), 3u);
    std::string printed = kir::print(k);
    EXPECT_NE(printed.find("barrier"), std::string::npos) << printed;
    EXPECT_NE(printed.find("s0[idiv(imod(i0, 512), 32)] = "), std::string::npos) << printed;
    const char* ptxas = "/usr/local/cuda/bin/ptxas";
    if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "SKIP: no ptxas (CUDA toolkit) on this machine";
    llvm::LLVMContext ctx;
    auto spec = codegen::TargetSpec::nvptx("sm_90");
    auto mod = codegen::emitKernels(ctx, **gpu, spec);
    ASSERT_TRUE(!!mod) << errorText(mod.takeError());
    auto ptx = codegen::compileModule(**mod, spec);
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    for (const char* want : {"st.shared.f32", "bar.sync", "ld.global.v4.b32", "st.global.v4.b32", "shfl.sync.bfly"})
      EXPECT_NE(ptx->find(want), std::string::npos) << want;
    auto [rc, log] = assembled(*ptx, ptxas);
    EXPECT_EQ(rc, 0) << log;
    for (size_t at = log.find("bytes spill stores"); at != std::string::npos; at = log.find("bytes spill stores", at + 1))
      EXPECT_EQ(std::stoi(log.substr(log.rfind(',', at) + 2)), 0) << log;
    for (size_t at = log.find("Used "); at != std::string::npos; at = log.find("Used ", at + 1))
      EXPECT_LE(std::stoi(log.substr(at + 5)), 65536 / (512 * 2)) << log;
  }
}

TEST(Kernel, OptimizerKernelsMove16BytesPerGpuAccess) {
  // AdamW reads a parameter, its gradient and two moments and writes three of them: stores only,
  // so that a GPU thread moves 16 bytes of each (4 f32), as an elementwise kernel does; the new
  // values are still all computed before any is stored (the plan updates them in place).
  auto g = ir::parse("graph @g { input %p : f32[64, 32]\n input %g : f32[64, 32]\n input %m : f32[64, 32]\n input %v : f32[64, 32]\n"
                     " input %lr : f32[]\n input %k : i64[]\n"
                     " %p2 : ?[*], %m2 : ?[*], %v2 : ?[*] = AdamUpdate(%p, %g, %m, %v, %lr, %k) {decoupled = 1, weight_decay = 0.01}\n"
                     " output %p2, %m2, %v2 }",
                     "adam");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  auto ks = kir::lowerNode("k", *(*g)->nodes().front());
  ASSERT_TRUE(!!ks) << errorText(ks.takeError());
  ASSERT_EQ(ks->size(), 1u);
  EXPECT_EQ(kir::vectorWidthFor(ks->front()), 4);
  llvm::LLVMContext ctx;
  auto spec = codegen::TargetSpec::nvptx("sm_90");
  auto mod = codegen::emitKernels(ctx, *ks, spec);
  ASSERT_TRUE(!!mod) << errorText(mod.takeError());
  auto ptx = codegen::compileModule(**mod, spec);
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  EXPECT_NE(ptx->find("ld.global.v4"), std::string::npos) << *ptx;
  EXPECT_NE(ptx->find("st.global.v4"), std::string::npos) << *ptx;
}

TEST(Kernel, ElementwiseKernelsMove16BytesPerGpuAccess) {
  // An elementwise kernel runs 16 bytes of its widest streamed elements per GPU thread (8 bf16,
  // 4 f32; fewer when the extent is not a multiple; a broadcast operand does not count), whose
  // loads and stores LLVM merges into vector accesses; kernels with inner loops (a long sum)
  // keep one iteration per thread.
  struct Want {
    const char* ir;
    int width;
  };
  for (const Want& w : {Want{"graph @g { input %a : bf16[64, 32]\n %y : ?[*] = Cast(%a) {to = \"f32\"}\n output %y }", 4},
                        // bf16 in and out, scaled by an f32 row: the broadcast row does not narrow the width.
                        Want{"graph @g { input %a : bf16[64, 32]\n input %b : f32[32]\n %c : ?[*] = Cast(%a) {to = \"f32\"}\n"
                             " %m : ?[*] = Mul(%c, %b)\n %y : ?[*] = Cast(%m) {to = \"bf16\"}\n output %y }", 8},
                        Want{"graph @g { input %a : f32[64, 32]\n input %b : f32[32]\n %y : ?[*] = Add(%a, %b)\n output %y }", 4},
                        Want{"graph @g { input %a : f32[3, 2]\n %y : ?[*] = Neg(%a)\n output %y }", 2},
                        // A sum of 4 heads (a grouped-query attention's key gradients): elementwise.
                        Want{"graph @g { input %a : bf16[2, 4, 16, 64]\n"
                             " const %s : i64[4] = dense<\"0x0200000000000000010000000000000010000000000000004000000000000000\">\n"
                             " %y : ?[*] = SumTo(%a, %s)\n output %y }", 8},
                        Want{"graph @g { input %a : f32[8, 32]\n const %ax : i64[1] = dense<\"0x0100000000000000\">\n"
                             " %y : ?[*] = ReduceSum(%a, %ax)\n output %y }", 1}}) {
    auto g = ir::parse(w.ir, "v");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    kir::Kernel k = lower(**g);
    ASSERT_TRUE(k.body);
    EXPECT_EQ(kir::vectorWidthFor(k), w.width) << w.ir;
    if (w.width != 8) continue;
    llvm::LLVMContext ctx;
    auto spec = codegen::TargetSpec::nvptx("sm_90");
    auto mod = codegen::emitKernels(ctx, {k}, spec);
    ASSERT_TRUE(!!mod) << errorText(mod.takeError());
    auto ptx = codegen::compileModule(**mod, spec);
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    EXPECT_NE(ptx->find("ld.global.v4.b32"), std::string::npos) << *ptx; // 8 bf16 in one load
    EXPECT_NE(ptx->find("st.global.v4"), std::string::npos) << *ptx; // and in one store
    EXPECT_EQ(ptx->find("ld.global.u16"), std::string::npos) << *ptx;
  }
}

namespace {

/// The kernel of y = LeakyRelu(x) {alpha} over the named buffers (alpha is inlined in the code).
kir::Kernel leaky(const std::string& x, const std::string& y, double alpha) {
  char a[40];
  snprintf(a, sizeof a, "%.17g", alpha);
  auto g = ir::parse("graph @g {\n  input %" + x + " : f64[8]\n  %" + y + " : ?[*] = LeakyRelu(%" + x + ") {alpha = " + a +
                     "}\n  output %" + y + "\n}\n", "k");
  EXPECT_TRUE(!!g);
  EXPECT_FALSE(ir::inferShapes(**g));
  auto ks = kir::lowerNode("k_" + y, *(*g)->nodes()[0]);
  EXPECT_TRUE(!!ks);
  return (*ks)[0];
}

} // namespace

// A program carries kernels of equal content once (codegen/Program.cpp): the key must tell apart
// kernels that compute differently, down to a constant's last bit, and not their buffers' names.
TEST(Kernel, ContentKeyIgnoresNamesNotConstants) {
  kir::Kernel a = leaky("x", "y", 0.1), b = leaky("u", "v", 0.1), c = leaky("x", "y", std::nextafter(0.1, 1.0));
  EXPECT_EQ(kir::contentKey(a), kir::contentKey(b));
  EXPECT_NE(kir::contentKey(a), kir::contentKey(c));
  b.threads = 128;
  EXPECT_NE(kir::contentKey(a), kir::contentKey(b));
  // An expression using its subexpression twice at each of 40 levels (2^40 leaves as a tree)
  // is keyed once per node: a shared node is written in full the first time, then referred to.
  kir::Builder d("d");
  int i = d.newLoopVar();
  kir::ExprRef x = kir::loopVar(i);
  for (int level = 0; level < 40; ++level) x = kir::binary(kir::KOp::Add, x, x);
  kir::Kernel deep = d.finish(kir::loop(i, 8, true, {kir::let(d.newLocal(), x)}));
  EXPECT_LT(kir::contentKey(deep).size(), 40u * 64);
}

TEST(Kernel, SumsOverTheLastDimsAreAWarpPerSpan) {
  // A loss's mean over all of a batch, and row sums: each warp sums a span of a row from
  // neighbouring 16-byte loads and adds it atomically (not a thread per 256 terms 1 KB apart).
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  const char* graphs[] = {
      "graph @g { input %x : f32[64, 4096]\n %y : ?[*] = ReduceMean(%x) {keepdims = 0}\n output %y }",
      "graph @g { input %x : f32[8, 2048]\n const %ax : i64[1] = dense<\"0x0100000000000000\">\n %y : ?[*] = ReduceSum(%x, %ax)\n output %y }",
  };
  for (const char* text : graphs) {
    auto g = ir::parse(text, "gpu");
    ASSERT_TRUE(!!g) << errorText(g.takeError());
    ASSERT_FALSE(ir::inferShapes(**g, false));
    auto gpu = kir::lowerForGpu("k", *(*g)->nodes()[0]);
    ASSERT_TRUE(!!gpu) << errorText(gpu.takeError());
    ASSERT_TRUE(gpu->has_value()) << text;
    ASSERT_EQ((*gpu)->size(), 2u); // zeroing, then the warps
    EXPECT_TRUE((**gpu)[1].gpuOnly);
    llvm::LLVMContext ctx;
    auto spec = codegen::TargetSpec::nvptx("sm_90");
    auto mod = codegen::emitKernels(ctx, **gpu, spec);
    ASSERT_TRUE(!!mod) << errorText(mod.takeError());
    auto ptx = codegen::compileModule(**mod, spec);
    ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
    EXPECT_NE(ptx->find("ld.global.v4.f32"), std::string::npos) << *ptx;
    EXPECT_NE(ptx->find("shfl.sync.bfly"), std::string::npos) << *ptx;
    if (!std::filesystem::exists(ptxas)) continue; // SKIP the assembly: no CUDA toolkit
    auto [rc, log] = assembled(*ptx, ptxas);
    EXPECT_EQ(rc, 0) << log;
  }
}

// A bf16 local (kir::letBf16) holds its values rounded to bf16, to nearest even, its let's and
// its later sets', and reads back as f32: on this CPU through LLVM's JIT, against the rounding
// ir::Tensor does for a bf16 tensor; the printed kernel and its content key say so.
TEST(Kernel, Bf16LocalsHoldTheirValuesRounded) {
  using namespace kir;
  Kernel k;
  k.name = "narrow";
  k.buffers = {{"x", ir::DType::F32, 64, false}, {"y", ir::DType::F32, 64, true}, {"z", ir::DType::F32, 64, true}};
  k.numLoopVars = 1;
  k.numLocals = 1;
  ExprRef i = loopVar(0);
  ExprRef x = load(0, i, Scalar::F32);
  k.body = loop(0, 64, true, {letBf16(0, x), store(1, i, local(0, Scalar::F32)), set(0, x * 3.0), store(2, i, local(0, Scalar::F32))});
  Kernel wide = k;
  wide.body = loop(0, 64, true, {let(0, x), store(1, i, local(0, Scalar::F32)), set(0, x * 3.0), store(2, i, local(0, Scalar::F32))});
  EXPECT_NE(print(k).find("let t0: bf16 = b0[i0]"), std::string::npos) << print(k);
  EXPECT_NE(contentKey(k), contentKey(wide));
  ir::Tensor in(ir::DType::F32, {64}), y(ir::DType::F32, {64}), z(ir::DType::F32, {64});
  for (int64_t j = 0; j < 64; ++j) in.setF(j, 1 + (double)j / 256 + (j % 3 == 0 ? 1.0 / 512 : 0)); // halfway cases among them
  test::Jit jit({k});
  auto fn = jit.fn("narrow");
  ASSERT_TRUE(fn);
  void* args[] = {in.bytes.data(), y.bytes.data(), z.bytes.data()};
  fn(args, 0, 64);
  for (int64_t j = 0; j < 64; ++j) {
    ir::Tensor once(ir::DType::BF16, {2});
    once.setF(0, in.getF(j));
    once.setF(1, (double)(float)(in.getF(j) * 3.0));
    EXPECT_EQ(y.getF(j), once.getF(0)) << j;
    EXPECT_EQ(z.getF(j), once.getF(1)) << j;
  }
  int inexact = 0;
  for (int64_t j = 0; j < 64; ++j) inexact += y.getF(j) != in.getF(j);
  EXPECT_GT(inexact, 32); // most of the inputs are not bf16 values: the test sees the rounding
}

// Shared memory (codegen/kir/Kernel.h): a block stages a buffer by asynchronous copies, waits,
// meets at a barrier and reads it back reversed. The GPU code holds the instructions the IR
// says; a kernel that could run on the CPU may not use them. (The GPU runs them in
// bench/gpu_attention.py and the GPU bundle's fused attention.)
TEST(Kernel, SharedArraysCopiesAndBarriers) {
  using namespace kir;
  Kernel k;
  k.name = "staged";
  k.buffers = {{"x", ir::DType::BF16, 128, false}, {"y", ir::DType::F32, 128, true}, {"z", ir::DType::F32, 4, false}};
  k.shared = {{ir::DType::BF16, 128}, {ir::DType::F32, 4}};
  k.threads = 128;
  k.numLoopVars = 2;
  ExprRef i = loopVar(0);
  ExprRef eight = constantI64(8), chunks = constantI64(16);
  StmtRef copy = copyAsync(0, i * eight, 0, i * eight); // 16 threads copy 16 bytes each
  k.body = loop(0, 128, true,
                {loopUpTo(1, 1, select(lt(i, chunks), constantI64(1), constantI64(0)), {copy, copyAsync(1, constantI64(0), 2, constantI64(0), 4)}),
                 asyncCommit(), asyncWait(0), barrier(), store(1, i, sharedLoad(0, constantI64(127) - i, Scalar::F32) + sharedLoad(1, constantI64(0), Scalar::F32))});
  k.gpuOnly = false;
  llvm::LLVMContext ctx;
  auto spec = codegen::TargetSpec::nvptx("sm_90");
  auto refused = codegen::emitKernels(ctx, {k}, spec);
  ASSERT_FALSE(!!refused);
  EXPECT_NE(errorText(refused.takeError()).find("shared memory is for GPU-only kernels"), std::string::npos);
  k.gpuOnly = true;
  std::string text = print(k);
  for (const char* want : {"shared s0: bf16[128]", "shared s1: f32[4]", "s0[mul(i0, 8)...] = b0[mul(i0, 8)...] (16 bytes, async)",
                           "s1[0...] = b2[0...] (4 bytes, async)", "async_commit", "async_wait(0)", "barrier", "b1[i0] = add(s0[sub(127, i0)], s1[0])"})
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  Kernel bigger = k;
  bigger.shared[0].count = 256;
  EXPECT_NE(contentKey(k), contentKey(bigger));
  auto mod = codegen::emitKernels(ctx, {k}, spec);
  ASSERT_TRUE(!!mod) << errorText(mod.takeError());
  auto ptx = codegen::compileModule(**mod, spec);
  ASSERT_TRUE(!!ptx) << errorText(ptx.takeError());
  for (const char* want : {".shared .align 16 .b8 staged_s0[256]", "cp.async.cg.shared.global", "cp.async.ca.shared.global", "cp.async.commit_group", "cp.async.wait_group 0",
                           "bar.sync \t0", "ld.shared.u16"})
    EXPECT_NE(ptx->find(want), std::string::npos) << want << "\n" << *ptx;
  // Past 48 KiB the arrays live in the block's dynamic shared memory, which a launch asks for: 64
  // KiB and the f32 array after it, 16-byte aligned as it is. Past an sm_90 block's 227 KiB: an error.
  EXPECT_EQ(dynamicSharedBytes(k), 0);
  bigger.shared[0].count = 32 << 10;
  EXPECT_EQ(sharedOffsets(bigger), (std::vector<int64_t>{0, 64 << 10}));
  EXPECT_EQ(dynamicSharedBytes(bigger), (64 << 10) + 16);
  auto dynamic = codegen::emitKernels(ctx, {bigger}, spec);
  ASSERT_TRUE(!!dynamic) << errorText(dynamic.takeError());
  auto dynamicPtx = codegen::compileModule(**dynamic, spec);
  ASSERT_TRUE(!!dynamicPtx) << errorText(dynamicPtx.takeError());
  EXPECT_NE(dynamicPtx->find(".extern .shared .align 16 .b8 staged_dynamic[]"), std::string::npos) << *dynamicPtx;
  EXPECT_EQ(dynamicPtx->find("staged_s0"), std::string::npos) << *dynamicPtx;
  Kernel aligned = bigger;
  aligned.shared[0].align = 1024; // its start rounded up at run time: 1008 bytes more asked for
  EXPECT_EQ(dynamicSharedBytes(aligned), (64 << 10) + 16 + 1008);
  bigger.shared[0].count = 120 << 10; // 240 KiB
  auto tooBig = codegen::emitKernels(ctx, {bigger}, spec);
  ASSERT_FALSE(!!tooBig);
  EXPECT_NE(errorText(tooBig.takeError()).find("more than a block's"), std::string::npos);
}

TEST(Kernel, AMultiOutputGroupReadsAnElementBeforeItWritesIt) {
  // b = 2a is stored in a's own bytes (the plan may put it in place of an input that dies in the
  // kernel) and c = a + b reads a too: each element's values are all computed before any is
  // stored, so c is 3a, not 2a + 2a.
  auto g = ir::parse(R"(graph @g {
    input %a : f32[64]
    const %two : f32[] = dense<"0x00000040">
    %b : ?[*] = Mul(%a, %two)
    %c : ?[*] = Add(%a, %b)
    output %c, %b })", "inplace");
  ASSERT_TRUE(!!g) << errorText(g.takeError());
  ASSERT_FALSE(ir::inferShapes(**g, false));
  std::vector<const ir::Node*> group;
  for (auto& n : (*g)->nodes()) group.push_back(n.get());
  auto k = kir::lowerElementwise("k", group, {(*g)->findValue("b")});
  ASSERT_TRUE(!!k) << errorText(k.takeError());
  std::vector<float> a(64), c(64);
  for (int i = 0; i < 64; ++i) a[i] = (float)i - 20;
  std::vector<float> original = a;
  float two = 2;
  std::map<std::string, void*> at{{"a", a.data()}, {"two", &two}, {"b", a.data()}, {"c", c.data()}};
  std::vector<void*> args;
  for (const kir::BufferArg& b : k->buffers) args.push_back(at.at(b.name));
  ASSERT_EQ(args.size(), 4u);
  Jit jit({*k});
  auto fn = jit.fn("k");
  ASSERT_TRUE(fn);
  fn(args.data(), 0, k->body->extent);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(a[i], 2 * original[i]) << i;
    EXPECT_EQ(c[i], 3 * original[i]) << i;
  }
}
