// sgc compile (for now: import and print the IR) and sgc opt (run passes).
#include "driver/Args.h"
#include "driver/Common.h"

#include "driver/TrainingFlags.h"

#include "codegen/MemoryPlan.h"
#include "ir/Text.h"
#include "ir/passes/BindDims.h"
#include "ir/passes/Passes.h"

#include <cstdio>
#include <fstream>

namespace sgc::driver {
namespace {

const CommandSpec kCompile{
    "compile", "sgc compile MODEL.onnx|MODEL.sgcir --emit=ir|plan [--train [training flags]] [--dim N=8] [-o FILE]",
    "Imports a model and prints a stage of its compilation: its IR (after infer-shapes), or with\n"
    "--train the whole training step; --emit=plan prints the static memory plan (needs static\n"
    "shapes: bind symbolic dims with --dim). Code generation to a .so is not built yet.",
    [] {
      std::vector<OptionSpec> o{{"emit", "KIND", "what to produce: ir or plan"},
                                {"train", "", "build the training step (implied by any training flag)"},
                                {"dim", "N=SIZE,...", "bind symbolic input dims to sizes"},
                                {"o", "FILE", "write the output to FILE instead of standard output"},
                                {"print-data", "", "print all tensor data (default: tensors over 64 bytes are elided)"}};
      for (auto& f : trainingFlagSpecs()) o.push_back(f);
      return o;
    }()};

const CommandSpec kOpt{
    "opt", "sgc opt MODEL.onnx|FILE.sgcir --passes=a,b,... [--verify-each] [-o FILE] [--print-data]",
    "Runs IR passes in order and prints the resulting IR. Passes: infer-shapes, dce,\ntraining-step (the whole training step with SGD; see sgc train for the options).",
    {{"passes", "LIST", "comma-separated pass names"},
     {"verify-each", "", "run the verifier after each pass"},
     {"o", "FILE", "write the IR to FILE instead of standard output"},
     {"print-data", "", "print all tensor data (default: tensors over 64 bytes are elided)"}}};

int emitText(const std::string& text, const Args& args) {
  if (!args.has("o")) {
    fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::ofstream f(args.get("o"));
  f << text;
  if (!f) return reportError(args.get("o") + ": cannot write");
  return 0;
}

int emitIR(const ir::Graph& g, const Args& args) {
  ir::PrintOptions po;
  if (!args.has("print-data")) po.elideDataAbove = 64;
  return emitText(ir::print(g, po), args);
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

} // namespace

int compileMain(int argc, char** argv) {
  bool help = false;
  auto args = Args::parse(kCompile, argc, argv, help);
  if (!args) return help ? 0 : 2;
  if (args->positional().size() != 1) return reportError("compile takes one model (see sgc compile --help)");
  std::string emit = args->get("emit", "so");
  if (emit != "ir" && emit != "plan")
    return reportError("--emit=" + emit + ": code generation is not built yet; --emit=ir and --emit=plan are available");
  const std::string& model = args->positional()[0];
  auto g = loadModel(model);
  if (!g) return reportError(g.takeError());
  if (args->has("dim")) {
    auto dims = parseDims(args->get("dim"));
    if (!dims) return reportError(dims.takeError());
    if (Error e = ir::bindDims(**g, *dims)) return reportError(model + ": " + errorText(std::move(e)));
  }
  if (args->has("train") || hasTrainingFlags(*args)) {
    auto opts = parseTrainingFlags(*args);
    if (!opts) return reportError(opts.takeError());
    if (Error e = ir::buildTrainingStep(**g, *opts)) return reportError(model + ": " + errorText(std::move(e)));
  }
  if (emit == "ir") return emitIR(**g, *args);
  auto plan = codegen::planMemory(**g);
  if (!plan) return reportError(model + ": " + errorText(plan.takeError()));
  if (Error e = codegen::checkPlan(*plan)) return reportError(model + ": the memory plan is unsound: " + errorText(std::move(e)));
  return emitText(codegen::printPlan(**g, *plan), *args);
}

int optMain(int argc, char** argv) {
  bool help = false;
  auto args = Args::parse(kOpt, argc, argv, help);
  if (!args) return help ? 0 : 2;
  if (args->positional().size() != 1) return reportError("opt takes one model or IR file (see sgc opt --help)");
  auto g = loadModel(args->positional()[0]);
  if (!g) return reportError(g.takeError());
  if (Error e = ir::runPasses(**g, splitList(args->get("passes")), args->has("verify-each"))) return reportError(std::move(e));
  return emitIR(**g, *args);
}

} // namespace sgc::driver
