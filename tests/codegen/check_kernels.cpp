// sgc-check-kernels MODEL.onnx [OPTIMIZER]: builds the model's training
// step, then runs it node by node on random data twice: through the
// reference interpreter, and through the node's kernels compiled by LLVM for
// this CPU (JIT). Every result must agree (1e-4 relative for f32). Then the
// same kernels go to PTX for sm_90 and sm_80, which ptxas must assemble (SKIP
// without the CUDA toolkit). Prints the counts and exits non-zero on any
// difference or failure.
#include "codegen/kir/LowerOps.h"
#include "codegen/llvm/Emitter.h"
#include "frontend/onnx/Importer.h"
#include "ir/interp/Interpreter.h"
#include "ir/training/TrainingStep.h"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/TargetSelect.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <algorithm>
#include <map>
#include <random>

using namespace sgc;

namespace {

ir::Tensor randomInput(const ir::Value& v, std::mt19937& rng) {
  ir::Tensor t(v.type.dtype, v.type.shape());
  std::uniform_real_distribution<double> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (ir::isFloat(t.dtype)) t.setF(i, u(rng));
    else t.setI(i, (int64_t)(rng() % 4)); // labels and token ids: valid for every test model
  }
  if (v.name == ir::kLrInput) t.setF(0, 1e-3);
  return t;
}

double maxRelDiff(const ir::Tensor& a, const ir::Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.getF(i), y = b.getF(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    worst = std::max(worst, std::fabs(x - y) / (1 + std::fabs(y)));
  }
  return worst;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: sgc-check-kernels MODEL.onnx [sgd|adam|adamw]\n");
    return 2;
  }
  auto g = onnx_import::importModel(argv[1]);
  if (!g) return fprintf(stderr, "%s\n", errorText(g.takeError()).c_str()), 1;
  ir::TrainingOptions opts;
  opts.optimizer.kind = argc > 2 ? argv[2] : "adamw";
  opts.optimizer.momentum = opts.optimizer.kind == "sgd" ? 0.9 : 0;
  if (Error e = ir::buildTrainingStep(**g, opts)) return fprintf(stderr, "%s\n", errorText(std::move(e)).c_str()), 1;
  std::mt19937 rng(11);
  std::map<const ir::Value*, ir::Tensor> env;
  for (ir::Value* v : (*g)->inputs) env[v] = randomInput(*v, rng);
  for (const auto* list : {&(*g)->params, &(*g)->state, &(*g)->consts})
    for (ir::Value* v : *list) env[v] = *v->data;
  // The step counter must be 1 for a first step.
  env[(*g)->findValue(ir::kStepState)] = ir::Tensor::scalarI64(0);
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto jit = llvm::orc::LLJITBuilder().create();
  if (!jit) return fprintf(stderr, "%s\n", llvm::toString(jit.takeError()).c_str()), 1;
  int nodes = 0, kernels = 0, failures = 0;
  std::vector<std::pair<double, std::string>> worst; // the largest differences, for the report
  std::vector<kir::Kernel> all;
  for (const auto& n : (*g)->nodes()) {
    std::vector<const ir::Tensor*> ins;
    for (const ir::Value* v : n->inputs) ins.push_back(v ? &env.at(v) : nullptr);
    auto ref = ir::evalNode(*n, ins);
    if (!ref) return fprintf(stderr, "%s\n", errorText(ref.takeError()).c_str()), 1;
    std::string name = "n" + std::to_string(nodes++);
    // Later nodes read the interpreter's results, whatever happens to this one's kernels.
    struct Advance {
      const ir::Node& n;
      std::vector<ir::Tensor>& ref;
      std::map<const ir::Value*, ir::Tensor>& env;
      ~Advance() {
        for (size_t i = 0; i < n.outputs.size(); ++i)
          if (n.outputs[i]) env[n.outputs[i]] = ref[i];
      }
    } advance{*n, *ref, env};
    auto ks = kir::lowerNode(name, *n);
    if (!ks) {
      printf("LOWERING FAILED %s\n", errorText(ks.takeError()).c_str());
      ++failures;
      continue;
    }
    std::map<std::string, ir::Tensor> out;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (n->outputs[i]) out[n->outputs[i]->name] = ir::Tensor((*ref)[i].dtype, (*ref)[i].shape);
    all.insert(all.end(), ks->begin(), ks->end());
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto mod = codegen::emitKernels(*ctx, *ks, codegen::TargetSpec::x86());
    if (!mod) {
      printf("EMIT FAILED %s: %s\n", ir::describe(*n).c_str(), errorText(mod.takeError()).c_str());
      ++failures;
      continue;
    }
    if (Error e = (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(*mod), std::move(ctx))))
      return fprintf(stderr, "%s\n", llvm::toString(std::move(e)).c_str()), 1;
    for (const kir::Kernel& k : *ks) {
      ++kernels;
      std::vector<ir::Tensor> copies; // read-only inputs, copied so a wrong kernel cannot corrupt env
      copies.reserve(k.buffers.size());
      std::vector<void*> args;
      for (const kir::BufferArg& b : k.buffers) {
        if (out.count(b.name)) {
          args.push_back(out[b.name].bytes.data());
          continue;
        }
        copies.push_back(env.at((*g)->findValue(b.name)));
        args.push_back(copies.back().bytes.data());
      }
      auto sym = (*jit)->lookup(k.name);
      if (!sym) return fprintf(stderr, "%s\n", llvm::toString(sym.takeError()).c_str()), 1;
      auto fn = sym->toPtr<void (*)(void**, int64_t, int64_t)>();
      fn(args.data(), 0, kir::isSerial(k) ? 1 : k.body->extent);
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      if (!n->outputs[i]) continue;
      double d = maxRelDiff(out[n->outputs[i]->name], (*ref)[i]);
      double tol = n->outputs[i]->type.dtype == ir::DType::F64 ? 1e-10 : 1e-4;
      worst.push_back({d, ir::describe(*n) + " %" + n->outputs[i]->name});
      if (!(d <= tol)) {
        printf("MISMATCH %s result %%%s: max relative difference %.3g\n", ir::describe(*n).c_str(), n->outputs[i]->name.c_str(), d);
        ++failures;
      }
    }
  }
  printf("%s: %d nodes, %d kernels, %d passed, %d failed\n", argv[1], nodes, kernels, nodes - failures, failures);
  std::sort(worst.begin(), worst.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; i < std::min<size_t>(worst.size(), 5); ++i) printf("  %.2e  %s\n", worst[i].first, worst[i].second.c_str());
  const char* ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) {
    printf("SKIP: ptxas (CUDA toolkit) not found\n");
    return failures ? 1 : 0;
  }
  for (const char* sm : {"sm_90", "sm_80"}) {
    llvm::LLVMContext ctx;
    auto spec = codegen::TargetSpec::nvptx(sm);
    auto mod = codegen::emitKernels(ctx, all, spec);
    auto ptx = mod ? codegen::compileModule(**mod, spec) : Expected<std::string>(mod.takeError());
    if (!ptx) {
      printf("PTX FAILED %s: %s\n", sm, errorText(ptx.takeError()).c_str());
      ++failures;
      continue;
    }
    auto dir = std::filesystem::temp_directory_path() / ("sgc-check-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "model.ptx") << *ptx;
    std::string cmd = std::string(ptxas) + " -arch=" + spec.cpu + " " + (dir / "model.ptx").string() + " -o " + (dir / "model.cubin").string();
    int rc = std::system(cmd.c_str());
    std::filesystem::remove_all(dir);
    printf("ptxas -arch=%s on %zu kernels (%zu bytes of PTX): %s\n", sm, all.size(), ptx->size(), rc == 0 ? "ok" : "FAILED");
    failures += rc != 0;
  }
  return failures ? 1 : 0;
}
