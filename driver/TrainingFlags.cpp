// Parsing of the training flags and --dim bindings.
#include "driver/TrainingFlags.h"

#include <cmath>
#include <cstdlib>

namespace sgc::driver {

std::vector<OptionSpec> trainingFlagSpecs() {
  return {{"optimizer", "NAME", "sgd (default), adam or adamw"},
          {"lr", "X", "learning rate (default 1e-3)"},
          {"momentum", "X", "SGD momentum (default 0)"},
          {"dampening", "X", "SGD dampening (default 0)"},
          {"nesterov", "", "SGD Nesterov momentum"},
          {"weight-decay", "X", "weight decay (default 0; adamw 0.01)"},
          {"betas", "B1,B2", "Adam betas (default 0.9,0.999)"},
          {"eps", "X", "Adam epsilon (default 1e-8)"},
          {"clip-grad-norm", "X", "clip gradients to this global L2 norm"},
          {"loss", "NAME", "the model output that is the loss (default: its single scalar output)"},
          {"freeze", "REGEX", "parameters whose name matches are not trained"},
          {"precision", "P", "f32 (default) or bf16: products and convolutions in bf16, elementwise functions of their bf16 results\n"
           "                               stored in bf16 (as torch.autocast), the rest and the weights in f32"},
          {"attention", "HOW", "auto (default): fused for a GPU target in bf16, else decomposed; decomposed: as the model\n"
                               "writes it (products through GEMMs); fused: flash attention, no stored scores (on a GPU\n"
                               "in bf16: tensor-core kernels)"},
          {"data-parallel", "MODE", "none (default); allreduce: gradients averaged over the ranks in buckets; zero1: also\n"
                                    "the optimizer state sharded over the ranks (with --ranks)"},
          {"bucket-mb", "MB", "all-reduce bucket size in megabytes (default 25)"},
          {"ranks", "N", "--data-parallel zero1: the number of ranks the library will run on"},
          {"classifier-chunk-mb", "MB", "an LM head's scores, its loss and their gradients run in row chunks of at most this many\n"
                                        "MiB, so that the scores never exist whole (default 1024; 0: whole)"}};
}

bool hasTrainingFlags(const Args& a, const std::string& except) {
  for (const auto& f : trainingFlagSpecs())
    if (a.has(f.name) && f.name != except) return true;
  return false;
}

Expected<double> numberFlag(const Args& a, const std::string& name, double def) {
  if (!a.has(name)) return def;
  std::string s = a.get(name);
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !std::isfinite(v)) return makeError("--" + name + " expects a number, got '" + s + "'");
  return v;
}

Expected<ir::TrainingOptions> parseTrainingFlags(const Args& a, bool forGpu) {
  ir::TrainingOptions o;
  o.loss = a.get("loss");
  o.freeze = a.get("freeze");
  o.precision = a.get("precision", "f32");
  o.attention = a.get("attention", "auto");
  if (o.attention == "auto") o.attention = forGpu && o.precision == "bf16" ? "fused" : "decomposed";
  o.dataParallel = a.get("data-parallel", "none");
  auto bucket = numberFlag(a, "bucket-mb", 25);
  if (!bucket) return bucket.takeError();
  o.bucketMb = *bucket;
  auto chunk = numberFlag(a, "classifier-chunk-mb", double(ir::kClassifierChunkBytes >> 20));
  if (!chunk || *chunk < 0 || *chunk > (1 << 30)) return makeError("--classifier-chunk-mb expects a size in MiB, 0 or more");
  o.classifierChunkBytes = (int64_t)(*chunk * (1 << 20));
  auto ranks = numberFlag(a, "ranks", 0);
  if (!ranks || *ranks < 0 || *ranks != std::floor(*ranks) || *ranks > 65536) return makeError("--ranks expects a positive integer");
  o.ranks = (int64_t)*ranks;
  auto& opt = o.optimizer;
  opt.kind = a.get("optimizer", "sgd");
  opt.nesterov = a.has("nesterov");
  for (auto [name, field] : std::initializer_list<std::pair<const char*, double*>>{
           {"lr", &opt.lr}, {"momentum", &opt.momentum}, {"dampening", &opt.dampening},
           {"weight-decay", &opt.weightDecay}, {"eps", &opt.eps}, {"clip-grad-norm", &opt.clipGradNorm}}) {
    auto v = numberFlag(a, name, *field);
    if (!v) return v.takeError();
    *field = *v;
  }
  if (a.has("betas")) {
    std::string b = a.get("betas");
    char *end = nullptr, *end2 = nullptr;
    opt.beta1 = std::strtod(b.c_str(), &end);
    if (*end != ',') return makeError("--betas expects B1,B2, got '" + b + "'");
    opt.beta2 = std::strtod(end + 1, &end2);
    if (*end2) return makeError("--betas expects B1,B2, got '" + b + "'");
  }
  if (Error e = ir::checkTrainingOptions(o)) return e;
  return o;
}

Expected<std::map<std::string, int64_t>> parseDims(const std::string& s) {
  std::map<std::string, int64_t> dims;
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    size_t eq = item.find('=');
    char* stop = nullptr;
    long long v = eq == std::string::npos ? -1 : std::strtoll(item.c_str() + eq + 1, &stop, 10);
    if (eq == std::string::npos || eq == 0 || !stop || *stop || v < 0 || eq + 1 == item.size())
      return makeError("--dim expects NAME=SIZE[,NAME=SIZE...], got '" + item + "'");
    dims[item.substr(0, eq)] = v;
    start = end + 1;
  }
  return dims;
}

} // namespace sgc::driver
