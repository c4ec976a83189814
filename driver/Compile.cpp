// sgc compile (for now: import and print the IR) and sgc opt (run passes).
#include "driver/Args.h"
#include "driver/Common.h"

#include "driver/DecodeStep.h"
#include "driver/TrainingFlags.h"

#include "codegen/AttentionScratch.h"
#include "codegen/DecodeBuckets.h"
#include "codegen/MemoryPlan.h"
#include "codegen/Package.h"
#include "codegen/Progress.h"
#include "codegen/Program.h"
#include "ir/Text.h"
#include "ir/passes/BindDims.h"
#include "ir/passes/ExpandResize.h"
#include "ir/passes/MergeConstants.h"
#include "ir/passes/Recompute.h"
#include "ir/passes/Passes.h"
#include "runtime/OutputFile.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <filesystem>
#include <fstream>

namespace sgc::driver {
namespace {

const CommandSpec kCompile{
    "compile", "sgc compile MODEL.onnx -o train.so [training flags] [--dim N=8] [--stats] | --emit=ir|plan|kernels|llvm|ptx|obj\n"
    "       sgc compile DECODER.onnx --mode decode -o gen.so --max-context C [--max-seqs S] [--kv-block-size N] [--kv-blocks N | --kv-budget-mb M]",
    "Compiles the training step of MODEL (forward, backward, optimizer) into a shared object with a C\n"
    "ABI (runtime/include/sgc/sgc.h) that trains on the CPU and GPUs. Shapes must be static: bind symbolic\n"
    "dims with --dim. --emit stops at a stage: ir (the imported graph, or with --train the training\n"
    "step), plan (the static memory plan), kernels (the kernel schedule: each kernel's nodes), llvm\n"
    "(the host module), ptx (the GPU kernels), obj (the host module's object file, to -o).\n"
    "With --mode decode, DECODER is a plain causal LM (input ids in, logits out, as Hugging Face\n"
    "models export) or a decoder exported with its key/value cache (past_key_values inputs, present\n"
    "outputs), and the library runs its decoding step over a paged cache whose pages are planned at\n"
    "compile time (see sgc generate).",
    [] {
      std::vector<OptionSpec> o{{"emit", "KIND", "so (default), ir, plan, kernels, llvm, ptx or obj"},
                                {"target", "LIST", "what the .so carries: cpu (always) and GPU architectures, default cpu,sm_90"},
                                {"stats", "", "print kernels, launches and bytes moved per step, and ptxas's registers a GPU kernel"},
                                {"quiet", "", "no progress lines (they are written to stderr when it is a terminal)"},
                                {"weights", "WHERE", "embedded (default), external (a .weights.safetensors file beside the .so) or none"},
                                {"cache-dir", "DIR", "reuse (and store) compiled .so files keyed by their content hash"},
                                {"recompute", "MODE", "activation recomputation: fused (default), none, cheap, selective or full"},
                                {"train", "", "build the training step (implied by any training flag)"},
                                {"dim", "N=SIZE,...", "bind symbolic input dims to sizes"},
                                {"input-type", "NAME=T,...", "a TorchScript forward's argument types, e.g. input_ids=i64[2,16] (default: as traced)"},
                                {"o", "FILE", "write the output to FILE instead of standard output"},
                                {"print-data", "", "print all tensor data (default: tensors over 64 bytes are elided)"}};
      for (auto& f : trainingFlagSpecs()) o.push_back(f);
      for (auto& f : decodeFlagSpecs()) o.push_back(f);
      return o;
    }()};

const CommandSpec kOpt{
    "opt", "sgc opt MODEL.onnx|FILE.sgcir --passes=a,b,... [--verify-each] [-o FILE] [--print-data]",
    "Runs IR passes in order and prints the resulting IR. Passes: infer-shapes, dce, fuse-attention,\nattention-layout, fuse-gelu, fuse-rms-norm, widen-sums, narrow-moves, fold-transposes, expand-resize, training-step (the whole training step with SGD; see sgc train for the options).",
    {{"passes", "LIST", "comma-separated pass names"},
     {"verify-each", "", "run the verifier after each pass"},
     {"o", "FILE", "write the IR to FILE instead of standard output"},
     {"print-data", "", "print all tensor data (default: tensors over 64 bytes are elided)"}}};

int emitText(const std::string& text, const Args& args) {
  if (!args.has("o")) {
    fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::string error;
  if (!rt::writeOutput(args.get("o"), text.data(), text.size(), error)) return reportError(error);
  return 0;
}

int emitIR(const ir::Graph& g, const Args& args) {
  ir::PrintOptions po;
  if (!args.has("print-data")) po.elideDataAbove = 64;
  return emitText(ir::print(g, po), args);
}

/// ptxas from $CUDA_HOME, /usr/local/cuda or the PATH; "" when absent.
std::string findPtxas() {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  if (const char* h = getenv("CUDA_HOME")) dirs.push_back(std::string(h) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  if (const char* path = getenv("PATH")) {
    std::string p = path;
    for (size_t start = 0; start <= p.size();) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      dirs.push_back(p.substr(start, end - start));
      start = end + 1;
    }
  }
  for (const std::string& d : dirs) {
    std::error_code ec;
    if (!d.empty() && fs::is_regular_file(fs::path(d) / "ptxas", ec)) return (fs::path(d) / "ptxas").string();
  }
  return "";
}

/// The first line of `ptxas --version`'s last line ("Cuda compilation tools, release 13.0, ...").
std::string ptxasVersion(const std::string& ptxas) {
  std::string cmd = "'" + ptxas + "' --version 2>/dev/null";
  std::string out, last;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[256];
    while (fgets(line, sizeof line, p)) last = line;
    pclose(p);
  }
  for (char c : last)
    out += isalnum((unsigned char)c) || c == '.' ? c : '_';
  return out;
}

/// Copies `from` to `to` through a temporary file renamed into place; false if `from` is absent.
bool copyAtomically(const std::string& from, const std::string& to) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(from, ec)) return false;
  std::string tmp = rt::temporaryFor(to), error;
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec && rt::commitOutput(tmp, to, error);
}

std::string envOr(const char* name, const char* def) {
  const char* v = getenv(name);
  return v && *v ? v : def;
}

/// The flags that shape the compiled program, in a fixed order (part of the content hash).
std::string canonicalFlags(const Args& a) {
  std::string s;
  for (const char* f : {"dim", "input-type", "target", "weights", "recompute", "optimizer", "lr", "momentum", "dampening", "nesterov", "weight-decay", "betas", "eps",
                        "clip-grad-norm", "loss", "freeze", "precision", "attention", "data-parallel", "bucket-mb", "ranks", "classifier-chunk-mb", "mode",
                        "kv-block-size", "max-seqs", "max-context", "kv-blocks", "kv-budget-mb", "max-tokens", "token-buckets", "kv-cache-dtype", "input-ids", "position-ids"})
    if (a.has(f)) s += std::string("--") + f + "=" + a.get(f) + "\n";
  return s;
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> r;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) r.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return r;
}

/// The token buckets of a decode step (codegen/DecodeBuckets.h), each compiled from the model anew
/// and added to `program`; 0, or the command's status.
int addTokenBuckets(codegen::CompiledProgram& program, const codegen::DecodeSpec& spec, const Args& args, const std::string& model, double lr,
                    codegen::Progress& progress) {
  auto buckets = tokenBuckets(args, spec);
  if (!buckets) return reportError(buckets.takeError());
  for (int64_t tokens : *buckets) {
    progress.stage("token bucket of " + std::to_string(tokens) + " tokens");
    auto g = loadModel(model, args.get("input-type", ""));
    if (!g) return reportError(g.takeError());
    auto bucketSpec = buildDecodeStep(**g, args, model, tokens);
    if (!bucketSpec) return reportError(bucketSpec.takeError());
    if (Error e = ir::expandResize(**g)) return reportError(model + ": " + errorText(std::move(e)));
    auto bucket = codegen::buildProgram(**g, canonicalFlags(args), lr, codegen::Weights::None, "", &*bucketSpec);
    if (!bucket) return reportError(model + ": token bucket " + std::to_string(tokens) + ": " + errorText(bucket.takeError()));
    if (Error e = codegen::addDecodeBucket(program, std::move(*bucket))) return reportError(model + ": " + errorText(std::move(e)));
  }
  return 0;
}

} // namespace

int compileMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kCompile, argc, argv, "one model", status);
  if (!args) return status;
  std::string emit = args->get("emit", "so");
  if (emit != "ir" && emit != "plan" && emit != "kernels" && emit != "llvm" && emit != "ptx" && emit != "obj" && emit != "so")
    return reportError("--emit=" + emit + ": expected so, ir, plan, kernels, llvm, ptx or obj");
  std::vector<std::string> gpus;
  for (const std::string& t : splitList(args->get("target", "cpu,sm_90"))) {
    if (t == "cpu") continue;
    if (t != "sm_90" && t != "sm_80") return reportError("--target " + t + ": expected cpu, sm_90 or sm_80");
    gpus.push_back(t);
  }
  if ((emit == "so" || emit == "obj") && !args->has("o")) return reportError("--emit=" + emit + " needs -o FILE");
  const std::string& model = args->positional()[0];
  codegen::Progress progress(isatty(STDERR_FILENO) && !args->has("quiet"));
  progress.stage("import " + model);
  auto g = loadModel(model, args->get("input-type", ""));
  if (!g) return reportError(g.takeError());
  if (args->has("dim")) {
    auto dims = parseDims(args->get("dim"));
    if (!dims) return reportError(dims.takeError());
    if (Error e = ir::bindDims(**g, *dims)) return reportError(model + ": " + errorText(std::move(e)));
  }
  int mergedConsts = 0; // tables an exporter folded once per use (a Llama's rotary tables, per layer)
  if (Error e = ir::mergeConstants(**g, &mergedConsts)) return reportError(model + ": " + errorText(std::move(e)));
  if (mergedConsts && args->has("stats")) fprintf(stderr, "constants merged with an equal one: %d\n", mergedConsts);
  std::string stepMode = args->get("mode", "train");
  if (stepMode != "train" && stepMode != "decode") return reportError("--mode " + stepMode + ": expected train or decode");
  std::optional<codegen::DecodeSpec> decode;
  if (stepMode == "decode") {
    if (args->has("train") || hasTrainingFlags(*args, "precision") || args->has("dim") || args->has("recompute"))
      return reportError("--mode decode builds a decoding step: training flags (but --precision), --dim and --recompute do not apply");
    auto spec = buildDecodeStep(**g, *args, model);
    if (!spec) return reportError(spec.takeError());
    decode = std::move(*spec);
  }
  bool train = !decode && (args->has("train") || hasTrainingFlags(*args) || (emit != "ir" && emit != "plan"));
  if (train) {
    progress.stage("training step: gradients and optimizer");
    auto opts = parseTrainingFlags(*args, !gpus.empty());
    if (!opts) return reportError(opts.takeError());
    warnCopiedParameters(**g, model);
    if (Error e = ir::buildTrainingStep(**g, *opts)) return reportError(model + ": " + errorText(std::move(e)));
    int repeated = 0;
    if (Error e = ir::recompute(**g, args->get("recompute", "fused"), &repeated)) return reportError(model + ": " + errorText(std::move(e)));
    if (args->has("stats")) {
      int losses = 0, attentions = 0, grouped = 0; // a classifier run in row chunks has one loss per chunk (passes/ChunkClassifier)
      for (const auto& n : (*g)->nodes()) {
        losses += n->op == ir::Op::SceLossGrad;
        if (n->op != ir::Op::FusedAttention) continue;
        attentions++;
        const ir::Type &q = n->input(0)->type, &k = n->input(1)->type; // grouped: fewer key heads ([..., H, T, D])
        grouped += n->getString("layout", "bhtd") == "bhtd" && q.rank() >= 3 && k.rank() == q.rank() && q.dims[q.rank() - 3] != k.dims[k.rank() - 3];
      }
      fprintf(stderr, "recomputed nodes: %d\nsoftmax cross-entropy nodes (one per classifier chunk): %d\n", repeated, losses);
      fprintf(stderr, "fused attention nodes: %d (with grouped keys and values: %d)\n", attentions, grouped);
    }
  }
  if (Error e = ir::expandResize(**g)) return reportError(model + ": " + errorText(std::move(e)));
  if (int scratches = codegen::addAttentionScratch(**g, codegen::gpuArchOf(canonicalFlags(*args))); scratches && args->has("stats"))
    fprintf(stderr, "attention gradients storing dS for their dq kernel: %d\n", scratches);
  if (emit == "ir") return emitIR(**g, *args);
  if (emit == "plan") {
    auto schedule = codegen::kernelSchedule(**g);
    auto plan = codegen::planMemory(**g, schedule, 64, {}, codegen::groupInternals(**g, schedule));
    if (!plan) return reportError(model + ": " + errorText(plan.takeError()));
    if (Error e = codegen::checkPlan(*plan)) return reportError(model + ": the memory plan is unsound: " + errorText(std::move(e)));
    return emitText(codegen::printPlan(**g, *plan), *args);
  }
  auto lr = numberFlag(*args, "lr", 1e-3);
  if (!lr) return reportError(lr.takeError());
  std::string weights = args->get("weights", "embedded");
  if (weights != "embedded" && weights != "external" && weights != "none")
    return reportError("--weights " + weights + ": expected embedded, external or none");
  auto mode = weights == "embedded" ? codegen::Weights::Embedded : weights == "external" ? codegen::Weights::External : codegen::Weights::None;
  std::string out = args->get("o");
  std::string weightsPath = out.substr(0, out.size() > 3 && out.substr(out.size() - 3) == ".so" ? out.size() - 3 : out.size()) + ".weights.safetensors";
  std::string weightsFile = weightsPath.substr(weightsPath.find_last_of('/') + 1);
  progress.stage("kernels and memory plan");
  auto program = codegen::buildProgram(**g, canonicalFlags(*args), *lr, mode, mode == codegen::Weights::External ? weightsFile : "",
                                       decode ? &*decode : nullptr);
  if (!program) return reportError(model + ": " + errorText(program.takeError()));
  if (decode)
    if (int st = addTokenBuckets(*program, *decode, *args, model, *lr, progress)) return st;
  progress.done();
  if (args->has("stats")) fputs(codegen::programStats(*program).c_str(), stderr);
  if (emit == "kernels") return emitText(codegen::printSchedule(*program), *args);
  if (emit == "llvm") {
    llvm::LLVMContext ctx;
    auto m = codegen::hostModule(ctx, *program, codegen::TargetSpec::x86());
    if (!m) return reportError(model + ": " + errorText(m.takeError()));
    return emitText(codegen::moduleText(**m), *args);
  }
  if (emit == "ptx") {
    auto ptx = codegen::kernelsPtx(*program, gpus.empty() ? "sm_90" : gpus[0]);
    if (!ptx) return reportError(model + ": " + errorText(ptx.takeError()));
    return emitText(*ptx, *args);
  }
  if (emit == "obj") {
    auto obj = codegen::hostObject(*program, codegen::TargetSpec::x86());
    if (!obj) return reportError(model + ": " + errorText(obj.takeError()));
    std::ofstream f(args->get("o"), std::ios::binary);
    f << *obj;
    return f ? 0 : reportError(args->get("o") + ": cannot write");
  }
  codegen::PackageOptions po;
  po.runtimeLib = envOr("SGC_RUNTIME_LIB", SGC_RUNTIME_LIB);
  po.versionScript = envOr("SGC_RUNTIME_MAP", SGC_RUNTIME_MAP);
  po.gpus = gpus;
  po.ptxas = findPtxas();
  po.progress = &progress;
  if (!gpus.empty() && po.ptxas.empty())
    return reportError("--target " + args->get("target", "cpu,sm_90") + " needs ptxas from the CUDA toolkit (not found in $CUDA_HOME/bin, "
                       "/usr/local/cuda/bin or PATH); use --target cpu for a CPU-only .so");
  if (mode == codegen::Weights::External)
    if (Error e = saveCheckpoint(**g, weightsPath, /*paramsOnly=*/true)) return reportError(std::move(e));
  // The cache key: the content hash (graph, options, sgc and LLVM versions) and the ptxas version.
  std::string cached;
  if (args->has("cache-dir")) {
    std::string key = program->hash;
    if (!gpus.empty()) key += "-" + ptxasVersion(po.ptxas);
    cached = (std::filesystem::path(args->get("cache-dir")) / (key + ".so")).string();
    if (copyAtomically(cached, out)) {
      if (args->has("stats")) fprintf(stderr, "cache: hit %s\n", cached.c_str());
      return 0;
    }
  }
  std::vector<codegen::GpuKernelResources> resources;
  if (args->has("stats") && !gpus.empty()) po.resources = &resources;
  if (Error e = codegen::writeSharedObject(*program, out, po)) return reportError(std::move(e));
  if (po.resources) fputs(codegen::resourcesReport(resources, gpus.front()).c_str(), stderr);
  if (!cached.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args->get("cache-dir"), ec);
    if (ec || !copyAtomically(out, cached)) return reportError(args->get("cache-dir") + ": cannot store the compiled library in the cache");
  }
  return 0;
}

int optMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kOpt, argc, argv, "one model or IR file", status);
  if (!args) return status;
  auto g = loadModel(args->positional()[0]);
  if (!g) return reportError(g.takeError());
  if (Error e = ir::runPasses(**g, splitList(args->get("passes")), args->has("verify-each"))) return reportError(std::move(e));
  return emitIR(**g, *args);
}

} // namespace sgc::driver
