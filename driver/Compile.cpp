// sgc compile (for now: import and print the IR) and sgc opt (run passes).
#include "driver/Args.h"
#include "driver/Common.h"

#include "ir/Text.h"
#include "ir/passes/Passes.h"

#include <cstdio>
#include <fstream>

namespace sgc::driver {
namespace {

const CommandSpec kCompile{
    "compile", "sgc compile MODEL.onnx|MODEL.sgcir --emit=ir [-o FILE] [--print-data]",
    "Imports a model and prints its IR (after infer-shapes). Code generation to a .so\n"
    "is not built yet: --emit=ir is the only output for now.",
    {{"emit", "KIND", "what to produce: ir"},
     {"o", "FILE", "write the output to FILE instead of standard output"},
     {"print-data", "", "print all parameter and constant data (default: tensors over 64 bytes are elided)"}}};

const CommandSpec kOpt{
    "opt", "sgc opt MODEL.onnx|FILE.sgcir --passes=a,b,... [--verify-each] [-o FILE] [--print-data]",
    "Runs IR passes in order and prints the resulting IR. Passes: infer-shapes, dce,\ntraining-step (the whole training step with SGD; see sgc train for the options).",
    {{"passes", "LIST", "comma-separated pass names"},
     {"verify-each", "", "run the verifier after each pass"},
     {"o", "FILE", "write the IR to FILE instead of standard output"},
     {"print-data", "", "print all tensor data (default: tensors over 64 bytes are elided)"}}};

int emitIR(const ir::Graph& g, const Args& args) {
  ir::PrintOptions po;
  if (!args.has("print-data")) po.elideDataAbove = 64;
  std::string text = ir::print(g, po);
  if (!args.has("o")) {
    fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  std::ofstream f(args.get("o"));
  f << text;
  if (!f) return reportError(args.get("o") + ": cannot write");
  return 0;
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
  if (emit != "ir")
    return reportError("--emit=" + emit + ": code generation is not built yet; only --emit=ir is available");
  auto g = loadModel(args->positional()[0]);
  if (!g) return reportError(g.takeError());
  return emitIR(**g, *args);
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
