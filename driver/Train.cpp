// sgc train: builds the training step of a model and runs it on the
// reference interpreter, one JSON line per step.
#include "driver/Args.h"
#include "driver/Common.h"
#include "driver/StepReport.h"
#include "driver/TrainingFlags.h"

#include "ir/interp/Interpreter.h"
#include "ir/training/TrainingStep.h"
#include "sgc/sgc.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sys/resource.h>

namespace sgc::driver {
namespace {

const CommandSpec kSpec{
    "train",
    "sgc train MODEL.onnx|MODEL.so --data DATA.safetensors --steps N [--optimizer sgd|adam|adamw] [--lr X] [options]",
    "Trains MODEL and prints one JSON line per step: {\"step\": i, \"loss\": x, \"ms\": t, \"samples_per_s\": r} (and\n"
    "\"tokens_per_s\" for inputs of token ids); on a terminal, one progress line instead. An ONNX model trains on the\n"
    "reference interpreter; a .so from sgc compile runs its compiled step (its optimizer is the one it was\n"
    "compiled with; --lr overrides the learning rate).\n"
    "DATA holds one tensor per model input, stacked along a new leading dimension; step i uses\n"
    "slice i % count (steps count on from a --load checkpoint). Trainable: every floating-point initializer the loss depends on, minus --freeze.\n"
    "Optimizers follow PyTorch (defaults: lr 1e-3, betas 0.9,0.999, eps 1e-8, weight decay 0; AdamW 0.01).",
    [] {
      std::vector<OptionSpec> o{{"data", "FILE", "safetensors file with the training data (required)"},
                                {"input-type", "NAME=T,...", "a TorchScript forward's argument types (default: as traced)"},
                                {"steps", "N", "number of steps (required)"}};
      for (auto& f : trainingFlagSpecs()) o.push_back(f);
      o.push_back({"load", "FILE", "start from this checkpoint (parameters and optimizer state)"});
      o.push_back({"device", "DEV", "for a compiled .so: cpu (default) or cuda:N"});
      o.push_back({"threads", "N", "for a compiled .so: worker threads (default: one per core)"});
      o.push_back({"comm", "KIND", "for a compiled .so: auto (default: mpi when run by mpirun), none, mpi (on a GPU:\n"
                                   "NCCL, its id sent over MPI) or nccl (GPU; with --rank, --world-size and\n"
                                   "--nccl-id-file). Each rank trains on its contiguous 1/N of every batch; rank 0\n"
                                   "prints the losses (their mean over the ranks) and saves"});
      o.push_back({"rank", "R", "--comm nccl: this process's rank"});
      o.push_back({"world-size", "N", "--comm nccl: the number of ranks"});
      o.push_back({"nccl-id-file", "FILE", "--comm nccl: rank 0 writes the NCCL id here, the others wait for it (a new path per run)"});
      o.push_back({"comm-timeout", "SECONDS", "for a compiled .so: a collective not finished by then fails the run (default 300)"});
      o.push_back({"save", "FILE", "write parameters and optimizer state here at the end"});
      o.push_back({"trace", "FILE", "for a compiled .so: write the last step's Chrome trace (every launch with its kernel, bytes,\n"
                                    "time and stream; Perfetto opens it) to FILE"});
      o.push_back({"metrics", "FILE", "append each step's loss, ms, samples/s (tokens/s) and peak memory to FILE in Prometheus's text format"});
      return o;
    }()};

/// The training data: per model input, the stacked tensor; returns the count of batches.
Expected<int64_t> loadData(const ir::Graph& g, const std::string& path, std::map<std::string, ir::Tensor>& data) {
  rt::StFile file;
  std::string error;
  if (!rt::readSafetensors(path, file, error)) return makeError(error);
  int64_t count = -1;
  for (const ir::Value* v : g.inputs) {
    if (v->name == ir::kLrInput) continue;
    auto it = file.find(v->name);
    if (it == file.end()) return makeError(path + ": no tensor for model input '" + v->name + "'");
    auto t = fromSafetensors(it->second, path + ": tensor '" + v->name + "'");
    if (!t) return t.takeError();
    if (t->rank() < 1 || t->shape[0] < 1)
      return makeError(path + ": tensor '" + v->name + "' needs a leading batch-count dimension");
    if (count >= 0 && t->shape[0] != count)
      return makeError(path + ": tensor '" + v->name + "' holds " + std::to_string(t->shape[0]) + " batches, others " + std::to_string(count));
    count = t->shape[0];
    data[v->name] = std::move(*t);
  }
  for (auto& [name, st] : file)
    if (!data.count(name)) return makeError(path + ": tensor '" + name + "' is not an input of the model");
  return count;
}

ir::Tensor sliceBatch(const ir::Tensor& t, int64_t i) {
  ir::Tensor s;
  s.dtype = t.dtype;
  s.shape.assign(t.shape.begin() + 1, t.shape.end());
  size_t bytes = t.bytes.size() / (size_t)t.shape[0];
  s.bytes.assign(t.bytes.begin() + i * bytes, t.bytes.begin() + (i + 1) * bytes);
  return s;
}

} // namespace

int trainMain(int argc, char** argv) {
  int status = 0;
  auto args = parseCommand(kSpec, argc, argv, "one model", status);
  if (!args) return status;
  if (!args->has("data") || !args->has("steps")) return reportError("train needs --data FILE and --steps N");
  auto steps = numberFlag(*args, "steps", 0);
  if (!steps) return reportError(steps.takeError());
  if (*steps < 0 || *steps != std::floor(*steps) || *steps > (double)SGC_MAX_STEP) {
    fprintf(stderr, "sgc: error: --steps expects an integer from 0 to 2^53, got '%s'\n", args->get("steps").c_str());
    return 2; // a usage error
  }
  const std::string& model = args->positional()[0];
  for (const char* flag : {"save", "trace", "metrics"}) // what a run writes: checked before it trains
    if (args->has(flag))
      if (Error e = checkSavePath(args->get(flag), {model, args->get("data")}, std::string("--") + flag)) return reportError(std::move(e));
  if (model.size() > 3 && model.substr(model.size() - 3) == ".so") {
    for (const char* f : {"optimizer", "momentum", "dampening", "nesterov", "weight-decay", "betas", "eps", "clip-grad-norm", "loss", "freeze", "precision", "data-parallel", "bucket-mb", "ranks", "classifier-chunk-mb"})
      if (args->has(f)) return reportError(std::string("--") + f + " is fixed when the .so is compiled; give it to sgc compile");
    return trainLibrary(model, *args, (int64_t)*steps);
  }
  if (args->has("device") && args->get("device") != "cpu") return reportError("the interpreter runs on the CPU only (--device cpu)");
  if (args->has("trace")) return reportError("--trace traces a compiled library's step: compile " + model + " with sgc compile first");
  for (const char* f : {"comm", "comm-timeout", "threads", "rank", "world-size", "nccl-id-file"})
    if (args->has(f)) return reportError(std::string("--") + f + " is for a compiled .so; the interpreter runs one process");
  auto opts = parseTrainingFlags(*args);
  if (!opts) return reportError(opts.takeError());
  auto g = loadModel(model, args->get("input-type", ""));
  if (!g) return reportError(g.takeError());
  warnCopiedParameters(**g, model);
  if (Error e = ir::buildTrainingStep(**g, *opts)) return reportError(model + ": " + errorText(std::move(e)));
  if (args->has("load"))
    if (Error e = loadCheckpoint(**g, args->get("load"))) return reportError(std::move(e));
  std::map<std::string, ir::Tensor> data;
  auto count = loadData(**g, args->get("data"), data);
  if (!count) return reportError(count.takeError());
  std::map<std::string, int64_t> symbols;
  for (const ir::Value* v : (*g)->inputs)
    if (v->name != ir::kLrInput)
      if (Error e = ir::checkInput(*v, sliceBatch(data[v->name], 0), symbols))
        return reportError(args->get("data") + ": one batch of " + errorText(std::move(e)));
  // Steps continue from a loaded checkpoint's counter, and so does the choice of batch.
  int64_t first = (*g)->findValue(ir::kStepState)->data->getI(0);
  BatchSize batch;
  for (const ir::Value* v : (*g)->inputs)
    if (auto it = data.find(v->name); it != data.end() && it->second.shape.size() > 1)
      batch.add(it->second.shape.data() + 1, (int32_t)it->second.shape.size() - 1, ir::isInteger(it->second.dtype));
  StepReport report(model, first, (int64_t)*steps, batch.samples, batch.tokens);
  std::string error;
  auto residentPeak = [] { // the interpreter's memory: the process's peak resident set
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return (int64_t)u.ru_maxrss * 1024;
  };
  if (args->has("metrics") && !report.metrics(args->get("metrics"), residentPeak, error)) return reportError(error);
  for (int64_t i = first; i < first + (int64_t)*steps; ++i) {
    std::map<std::string, ir::Tensor> feed;
    for (auto& [name, t] : data) feed[name] = sliceBatch(t, i % *count);
    feed[ir::kLrInput] = ir::Tensor::fromF64(ir::DType::F32, {}, {opts->optimizer.lr});
    auto out = ir::runStep(**g, feed);
    if (!out) return reportError(model + ": step " + std::to_string(i) + ": " + errorText(out.takeError()));
    double loss = out->begin()->second.getF(0);
    if (int r = report.step(i, loss)) return r;
  }
  if (args->has("save"))
    if (Error e = saveCheckpoint(**g, args->get("save"))) return reportError(std::move(e));
  return 0;
}

} // namespace sgc::driver
