// sgc run: evaluates a model on the reference interpreter with inputs and
// outputs in safetensors files keyed by the model's input and output names.
#include "driver/Args.h"
#include "driver/Common.h"

#include "ir/interp/Interpreter.h"

namespace sgc::driver {
namespace {
const CommandSpec kSpec{"run", "sgc run MODEL --inputs IN.safetensors -o OUT.safetensors",
                        "Evaluates MODEL on the reference interpreter (float64 accumulation). IN holds one\n"
                        "tensor per model input, named as the input; OUT receives the model's outputs.",
                        {{"inputs", "FILE", "safetensors file with the model inputs (may be omitted when there are none)"},
                         {"input-type", "NAME=T,...", "a TorchScript forward's argument types (default: as traced)"},
                         {"o", "FILE", "safetensors file to write the outputs to (required)"}}};
} // namespace

int runMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kSpec, argc, argv, "one model", status);
  if (!args) return status;
  if (!args->has("o")) return reportError("run needs -o OUT.safetensors");
  auto g = loadModel(args->positional()[0], args->get("input-type", ""));
  if (!g) return reportError(g.takeError());
  std::map<std::string, ir::Tensor> inputs;
  if (args->has("inputs")) {
    rt::StFile file;
    std::string error;
    if (!rt::readSafetensors(args->get("inputs"), file, error)) return reportError(error);
    for (auto& [name, st] : file) {
      auto t = fromSafetensors(st, args->get("inputs") + ": tensor '" + name + "'");
      if (!t) return reportError(t.takeError());
      inputs[name] = std::move(*t);
    }
  }
  auto outs = ir::run(**g, inputs);
  if (!outs) return reportError(args->positional()[0] + ": " + errorText(outs.takeError()));
  rt::StFile out;
  for (auto& [name, t] : *outs) out[name] = toSafetensors(t);
  std::string error;
  if (!rt::writeSafetensors(args->get("o"), out, error)) return reportError(error);
  return 0;
}

} // namespace sgc::driver
