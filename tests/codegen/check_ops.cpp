// sgc-check-ops: walks the op table and checks that every op the
// interpreter runs also compiles. Samples of each op come from ONNX's node
// tests (with their data) and from the training steps of real models (every
// gradient and optimizer op, on random data); each sample node is lowered to
// kernels, JIT-compiled for this CPU and run against the interpreter's
// result, and every op's kernels (generic and GPU forms) go to PTX for sm_90,
// which ptxas must assemble; the GPU forms also run in the GPU simulator
// (codegen/kir/Simulate.h) against the interpreter's result, the forms for
// every GPU since sm_80 and Hopper's. An op the code generator leaves out must say
// why in ir/Ops.def; an op generated but never sampled is reported.
// Usage: sgc-check-ops [--node-tests DIR]... [--model MODEL.onnx[:sgd][:fused]]... [--min-ops N]
#include "codegen/kir/LowerOps.h"
#include "codegen/kir/Simulate.h"
#include "codegen/llvm/Emitter.h"
#include "frontend/onnx/Importer.h"
#include "ir/interp/Interpreter.h"
#include "ir/passes/ExpandResize.h"
#include "ir/passes/InferShapes.h"
#include "ir/training/TrainingStep.h"

#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/Support/TargetSelect.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace sgc;

namespace {

struct OpStats {
  int samples = 0, cpuPass = 0, cpuFail = 0, lowerFail = 0, needsConstants = 0;
  int simPass = 0, simFail = 0, simSkipped = 0; ///< GPU forms in the simulator: matched, failed, too long to simulate
  std::string firstProblem;
  std::vector<kir::Kernel> kernels; ///< for the PTX check (the first few samples' kernels)
};

/// Relative tolerance of a kernel result against the interpreter's, by dtype: float32 rounding
/// of float64 references, one or two units in the last place of the narrow floats.
double tolerance(ir::DType t) {
  switch (t) {
  case ir::DType::F64: return 1e-10;
  case ir::DType::BF16: return 1.6e-2;
  case ir::DType::F16: return 2e-3;
  default: return 1e-4;
  }
}

/// The GPU forms': as the CPU's, but their products round operands to bf16 (the tensor-core
/// forms take bf16 operands only) and their sums run in other orders.
double gpuTolerance(ir::DType t) { return t == ir::DType::F32 ? 2e-4 : tolerance(t); }

double worstDiff(const ir::Tensor& a, const ir::Tensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (!ir::isFloat(a.dtype)) {
      if (a.getI(i) != b.getI(i)) return INFINITY;
      continue;
    }
    double x = a.getF(i), y = b.getF(i);
    if ((std::isnan(x) && std::isnan(y)) || x == y) continue;
    worst = std::max(worst, std::fabs(x - y) / (1 + std::fabs(y)));
  }
  return worst;
}

/// The most statements a simulated GPU form runs (about 0.1 s).
constexpr double kMostSimulated = 2e6;

class Checker {
public:
  std::map<ir::Op, OpStats> stats;

  Error init() {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto jit = llvm::orc::LLJITBuilder().create();
    if (!jit) return makeError(llvm::toString(jit.takeError()));
    jit_ = std::move(*jit);
    return Error::success();
  }

  /// Every node of `g` in order, its inputs from `env` (graph inputs, parameters, constants):
  /// the interpreter's results feed the next nodes; each node's kernels are checked on the way.
  /// A node test's shapes may depend on its data (axes or shapes fed as inputs): the walk gives
  /// each value the type of its tensor, and integer graph inputs become the constants that a
  /// compiled model would have folded them to.
  Error walk(ir::Graph& g, std::map<const ir::Value*, ir::Tensor>& env) {
    for (const auto* list : {&g.params, &g.state, &g.consts})
      for (ir::Value* v : *list) env[v] = *v->data;
    for (const auto& n : g.nodes()) {
      std::vector<const ir::Tensor*> ins;
      for (ir::Value* v : n->inputs) {
        ins.push_back(v ? &env.at(v) : nullptr);
        if (!v) continue;
        v->type = ir::Type::of(ins.back()->dtype, ins.back()->shape);
        if (v->kind == ir::ValueKind::Input && !ir::isFloat(v->type.dtype) && v->name != ir::kStepState) {
          v->kind = ir::ValueKind::Const;
          v->data = std::make_shared<const ir::Tensor>(*ins.back());
        }
      }
      auto ref = ir::evalNode(*n, ins);
      if (!ref) return ref.takeError();
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (n->outputs[i]) n->outputs[i]->type = ir::Type::of((*ref)[i].dtype, (*ref)[i].shape);
      checkNode(*n, ins, *ref);
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (n->outputs[i]) env[n->outputs[i]] = (*ref)[i];
    }
    return Error::success();
  }

private:
  void problem(OpStats& s, const std::string& what) {
    if (s.firstProblem.empty()) s.firstProblem = what;
  }

  void checkNode(const ir::Node& n, const std::vector<const ir::Tensor*>& ins, const std::vector<ir::Tensor>& ref) {
    OpStats& s = stats[n.op];
    ++s.samples;
    if (!ir::opInfo(n.op).generated) return;
    if (ir::opInfo(n.op).expanded) return checkExpanded(n, ins, ref, s);
    std::string name = "k" + std::to_string(count_++);
    auto ks = kir::lowerNode(name, n);
    if (!ks) {
      // Compiled code needs some operands known at compile time (a slice's bounds, a pad's
      // widths): a node test that computes them from its data is no sample of the kernel.
      std::string why = errorText(ks.takeError());
      if (why.find("must be known") != std::string::npos || why.find("must be constant") != std::string::npos) ++s.needsConstants;
      else ++s.lowerFail, problem(s, why);
      return;
    }
    auto sm80 = kir::lowerForGpu(name + "_gpu", n, kir::GpuArch{false}), sm90 = kir::lowerForGpu(name + "_sm90", n, kir::GpuArch{true});
    if (s.kernels.size() < 24) { // the PTX check: generic kernels and the GPU forms
      s.kernels.insert(s.kernels.end(), ks->begin(), ks->end());
      if (sm80 && *sm80) s.kernels.insert(s.kernels.end(), (*sm80)->begin(), (*sm80)->end());
    }
    std::string why = run(n, *ks, ins, ref);
    if (why.empty()) ++s.cpuPass;
    else ++s.cpuFail, problem(s, ir::describe(n) + ": " + why);
    if (!sm80) return ++s.simFail, problem(s, ir::describe(n) + ": its GPU form: " + errorText(sm80.takeError())), llvm::consumeError(sm90.takeError());
    if (*sm80) simulateForms(n, **sm80, "sm_80", ins, ref, s);
    if (!sm90) return ++s.simFail, problem(s, ir::describe(n) + ": its Hopper form: " + errorText(sm90.takeError()));
    if (*sm80 && *sm90 && contentKeys(**sm80) != contentKeys(**sm90)) simulateForms(n, **sm90, "sm_90", ins, ref, s); // Hopper's own
  }

  static std::vector<std::string> contentKeys(const std::vector<kir::Kernel>& ks) {
    std::vector<std::string> keys;
    for (const auto& k : ks) keys.push_back(kir::contentKey(k));
    return keys;
  }

  /// About how many statements a run of `s` executes (each loop's extent times its body's).
  static double work(const kir::Stmt& s) {
    double body = s.body.empty() ? 1 : 0;
    for (const auto& b : s.body) body += work(*b);
    return s.kind == kir::StmtKind::Loop ? (double)s.extent * body : body;
  }

  /// The node's operands (copies of `ins`) and results (`ref`'s shapes, every byte `fill`), by name.
  static std::map<std::string, ir::Tensor> nodeBuffers(const ir::Node& n, const std::vector<const ir::Tensor*>& ins,
                                                       const std::vector<ir::Tensor>& ref, uint8_t fill) {
    std::map<std::string, ir::Tensor> bufs;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (n.inputs[i]) bufs[n.inputs[i]->name] = *ins[i];
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (n.outputs[i]) {
        ir::Tensor t(ref[i].dtype, ref[i].shape);
        std::fill(t.bytes.begin(), t.bytes.end(), fill);
        bufs[n.outputs[i]->name] = std::move(t);
      }
    return bufs;
  }

  /// A GPU form of the node (`arch` names it), run in the GPU simulator against the interpreter's
  /// results (each one a kernel writes; the rest start as NaNs).
  void simulateForms(const ir::Node& n, const std::vector<kir::Kernel>& gpu, const char* arch, const std::vector<const ir::Tensor*>& ins,
                     const std::vector<ir::Tensor>& ref, OpStats& s) {
    for (const auto& k : gpu) // a quadratic loss total over thousands of rows takes seconds
      if (work(*k.body) > kMostSimulated) return void(++s.simSkipped);
    std::map<std::string, ir::Tensor> bufs = nodeBuffers(n, ins, ref, 0xFF);
    std::set<std::string> written;
    for (const auto& k : gpu) {
      std::vector<void*> args;
      for (const auto& b : k.buffers) {
        auto it = bufs.find(b.name);
        if (it == bufs.end()) return ++s.simFail, problem(s, ir::describe(n) + ": GPU kernel " + k.name + " reads %" + b.name + ", which is not the node's");
        args.push_back(it->second.bytes.data());
        if (b.written) written.insert(b.name);
      }
      if (Error e = kir::simulateGpu(k, args)) return ++s.simFail, problem(s, ir::describe(n) + ": simulated on the GPU: " + errorText(std::move(e)));
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i] || !written.count(n.outputs[i]->name)) continue;
      double d = worstDiff(bufs[n.outputs[i]->name], ref[i]);
      if (!(d <= gpuTolerance(ref[i].dtype))) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: its GPU form (%s) differs from the interpreter's %%%s by %.3g", ir::describe(n).c_str(), arch,
                 n.outputs[i]->name.c_str(), d);
        return ++s.simFail, problem(s, msg);
      }
    }
    ++s.simPass;
  }

  /// An op that a pass rewrites before code generation: the nodes it becomes, on the node's own
  /// operands (the first as an input, the others as the constants a compiled model has), each
  /// checked as any node is, and their result against the interpreter's of the node itself.
  void checkExpanded(const ir::Node& n, const std::vector<const ir::Tensor*>& ins, const std::vector<ir::Tensor>& ref, OpStats& s) {
    ir::Graph g;
    std::map<const ir::Value*, ir::Tensor> env;
    std::vector<ir::Value*> vs;
    for (size_t i = 0; i < ins.size(); ++i) {
      if (!ins[i]) vs.push_back(nullptr);
      else if (i == 0) vs.push_back(g.addInput("x", ir::Type::of(ins[0]->dtype, ins[0]->shape))), env[vs[0]] = *ins[0];
      else vs.push_back(g.addConst("operand" + std::to_string(i), *ins[i]));
    }
    ir::Node* copy = g.addNode(n.op, vs, 1, n.name);
    copy->attrs = n.attrs;
    g.outputs = {copy->outputs[0]};
    Error e = ir::inferShapes(g);
    if (!e) e = ir::expandResize(g);
    for (const auto& m : g.nodes())
      if (!e && m->op == n.op) e = makeError(ir::describe(n) + ": the pass left it as it was");
    if (!e) e = walk(g, env);
    if (e) return ++s.lowerFail, problem(s, errorText(std::move(e)));
    double d = worstDiff(env.at(g.outputs[0]), ref[0]);
    if (d <= tolerance(ref[0].dtype)) return void(++s.cpuPass);
    ++s.cpuFail;
    problem(s, ir::describe(n) + ": its expansion differs from the interpreter's result by " + std::to_string(d));
  }

  /// Runs the node's kernels on copies of its inputs; "" when every result matches.
  std::string run(const ir::Node& n, const std::vector<kir::Kernel>& ks, const std::vector<const ir::Tensor*>& ins,
                  const std::vector<ir::Tensor>& ref) {
    std::map<std::string, ir::Tensor> bufs = nodeBuffers(n, ins, ref, 0);
    auto ctx = std::make_unique<llvm::LLVMContext>();
    std::vector<kir::Kernel> cpu;
    for (const auto& k : ks)
      if (!k.gpuOnly) cpu.push_back(k);
    auto mod = codegen::emitKernels(*ctx, cpu, codegen::TargetSpec::x86());
    if (!mod) return "emit: " + errorText(mod.takeError());
    if (Error e = jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(*mod), std::move(ctx)))) return llvm::toString(std::move(e));
    for (const auto& k : cpu) {
      std::vector<void*> args;
      for (const auto& b : k.buffers) {
        auto it = bufs.find(b.name);
        if (it == bufs.end()) return "kernel " + k.name + " reads %" + b.name + ", which is not the node's";
        args.push_back(it->second.bytes.data());
      }
      auto sym = jit_->lookup(k.name);
      if (!sym) return llvm::toString(sym.takeError());
      sym->toPtr<void (*)(void**, int64_t, int64_t)>()(args.data(), 0, kir::isSerial(k) ? 1 : k.body->extent);
    }
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (!n.outputs[i]) continue;
      double d = worstDiff(bufs[n.outputs[i]->name], ref[i]);
      if (!(d <= tolerance(ref[i].dtype))) {
        char msg[160];
        snprintf(msg, sizeof msg, "result %%%s differs from the interpreter's by %.3g", n.outputs[i]->name.c_str(), d);
        return msg;
      }
    }
    return "";
  }

  std::unique_ptr<llvm::orc::LLJIT> jit_;
  int count_ = 0;
};

/// The node tests of `dir` (model.onnx with test_data_set_0): each imported graph walked on its data.
void walkNodeTests(Checker& ch, const fs::path& dir, int& graphs) {
  std::vector<fs::path> tests;
  for (auto& e : fs::directory_iterator(dir))
    if (fs::exists(e.path() / "model.onnx") && fs::exists(e.path() / "test_data_set_0")) tests.push_back(e.path());
  std::sort(tests.begin(), tests.end());
  for (const auto& t : tests) {
    auto g = onnx_import::importModel((t / "model.onnx").string());
    if (!g) { llvm::consumeError(g.takeError()); continue; }
    std::map<const ir::Value*, ir::Tensor> env;
    bool ok = true;
    for (size_t i = 0; i < (*g)->inputs.size() && ok; ++i) {
      fs::path p = t / "test_data_set_0" / ("input_" + std::to_string(i) + ".pb");
      auto v = fs::exists(p) && fs::file_size(p) ? onnx_import::readTensorFile(p.string()) : Expected<ir::Tensor>(makeError("no data"));
      if (!v || !(*g)->inputs[i]->type.isStatic() || v->shape != (*g)->inputs[i]->type.shape() || v->dtype != (*g)->inputs[i]->type.dtype) {
        if (!v) llvm::consumeError(v.takeError());
        ok = false;
        break;
      }
      env[(*g)->inputs[i]] = *v;
    }
    if (!ok) continue;
    if (Error e = ch.walk(**g, env)) { llvm::consumeError(std::move(e)); continue; }
    ++graphs;
  }
}

/// A model's training step on random data: the gradient and optimizer ops. `spec` is
/// PATH[:sgd][:fused] (SGD with momentum instead of AdamW; attention fused).
Error walkTrainingStep(Checker& ch, const std::string& spec) {
  std::string path = spec.substr(0, spec.find(':'));
  auto g = onnx_import::importModel(path);
  if (!g) return g.takeError();
  ir::TrainingOptions opts;
  opts.optimizer.kind = spec.find(":sgd") != std::string::npos ? "sgd" : "adamw";
  opts.optimizer.momentum = opts.optimizer.kind == "sgd" ? 0.9 : 0;
  if (spec.find(":fused") != std::string::npos) opts.attention = "fused";
  if (Error e = ir::buildTrainingStep(**g, opts)) return e;
  std::mt19937 rng(5);
  std::map<const ir::Value*, ir::Tensor> env;
  for (ir::Value* v : (*g)->inputs) {
    ir::Tensor t(v->type.dtype, v->type.shape());
    std::uniform_real_distribution<double> u(-1, 1);
    for (int64_t i = 0; i < t.numel(); ++i)
      ir::isFloat(t.dtype) ? t.setF(i, u(rng)) : t.setI(i, (int64_t)(rng() % 2)); // ids, labels, masks: small and valid
    if (v->name == ir::kLrInput) t.setF(0, 1e-3);
    env[v] = t;
  }
  env[(*g)->findValue(ir::kStepState)] = ir::Tensor::scalarI64(0);
  for (ir::Value* v : (*g)->params) env[v] = *v->data;
  return ch.walk(**g, env);
}

/// Assembles each op's kernels for sm_90; "" when ptxas accepts them.
std::string ptxCheck(const std::vector<kir::Kernel>& ks) {
  llvm::LLVMContext ctx;
  auto spec = codegen::TargetSpec::nvptx("sm_90");
  auto mod = codegen::emitKernels(ctx, ks, spec);
  auto ptx = mod ? codegen::compileModule(**mod, spec) : Expected<std::string>(mod.takeError());
  if (!ptx) return errorText(ptx.takeError());
  auto dir = fs::temp_directory_path() / ("sgc-check-ops-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "k.ptx") << *ptx;
  std::string cmd = "/usr/local/cuda/bin/ptxas -arch=" + spec.cpu + " " + (dir / "k.ptx").string() + " -o " + (dir / "k.cubin").string() + " 2>&1";
  int rc = std::system(cmd.c_str());
  fs::remove_all(dir);
  return rc == 0 ? "" : "ptxas failed";
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> nodeDirs, models;
  int minOps = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--node-tests") && i + 1 < argc) nodeDirs.push_back(argv[++i]);
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) models.push_back(argv[++i]);
    else if (!strcmp(argv[i], "--min-ops") && i + 1 < argc) minOps = atoi(argv[++i]);
    else return fprintf(stderr, "usage: sgc-check-ops [--node-tests DIR]... [--model MODEL.onnx]... [--min-ops N]\n"), 2;
  }
  Checker ch;
  if (Error e = ch.init()) return fprintf(stderr, "%s\n", errorText(std::move(e)).c_str()), 1;
  int graphs = 0;
  for (const auto& d : nodeDirs) walkNodeTests(ch, d, graphs);
  for (const auto& m : models) {
    if (Error e = walkTrainingStep(ch, m)) return fprintf(stderr, "%s: %s\n", m.c_str(), errorText(std::move(e)).c_str()), 1;
    ++graphs;
  }
  bool ptxas = fs::exists("/usr/local/cuda/bin/ptxas");
  int failures = 0, covered = 0, noCodegen = 0, unsampled = 0, gpuFail = 0, simFail = 0, simPass = 0, simSkipped = 0;
  printf("%-26s %8s %8s %6s %9s  %s\n", "op", "samples", "cpu ok", "sm_90", "GPU sim", "notes");
  for (int i = 0; i < ir::numOps(); ++i) {
    ir::Op op = (ir::Op)i;
    const ir::OpInfo& info = ir::opInfo(op);
    auto it = ch.stats.find(op);
    OpStats s = it == ch.stats.end() ? OpStats{} : it->second;
    std::string gpu = "-", note, sim = "-";
    if (s.simPass || s.simFail) sim = std::to_string(s.simPass) + "/" + std::to_string(s.simPass + s.simFail);
    simPass += s.simPass, simSkipped += s.simSkipped;
    if (!info.generated) {
      ++noCodegen;
      note = "not generated: " + std::string(info.notGenerated);
      if (info.notGenerated.empty()) ++failures, note = "NOT GENERATED AND NO REASON IN Ops.def";
    } else if (info.expanded && s.samples) {
      ++covered;
      note = "expanded by a pass before code generation: its parts' kernels are checked as theirs";
      if (s.cpuFail || s.lowerFail) ++failures, note = "FAILED: " + s.firstProblem.substr(0, 200);
    } else if (!s.samples) {
      ++unsampled;
      note = "no sample here (tested elsewhere or not at all)";
    } else {
      ++covered;
      if (ptxas && !s.kernels.empty()) {
        std::string why = ptxCheck(s.kernels);
        gpu = why.empty() ? "ok" : "FAIL";
        if (!why.empty()) ++gpuFail, note = "sm_90: " + why.substr(0, 120) + "; ";
      }
      if (s.simFail) ++simFail;
      if (s.cpuFail || s.lowerFail || s.simFail) ++failures, note += "FAILED: " + s.firstProblem.substr(0, 300);
    }
    printf("%-26s %8d %8d %6s %9s  %s\n", std::string(info.name).c_str(), s.samples, s.cpuPass, gpu.c_str(), sim.c_str(), note.c_str());
  }
  printf("%d graphs walked; %d ops: %d compiled and checked against the interpreter, %d not generated (each with its reason), "
         "%d generated without a sample here; %d failed on the CPU, %d failed ptxas%s\n",
         graphs, ir::numOps(), covered, noCodegen, unsampled, failures, gpuFail, ptxas ? "" : " (SKIP: no ptxas)");
  printf("GPU forms in the GPU simulator: %d matched the interpreter, %d ops failed, %d forms too long to simulate\n", simPass,
         simFail, simSkipped);
  if (covered < minOps) printf("fewer than the %d ops required\n", minOps);
  return failures || gpuFail || covered < minOps ? 1 : 0;
}
