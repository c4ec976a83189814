// Model loading and tensor conversion for the driver.
#include "driver/Common.h"

#include "frontend/onnx/Importer.h"
#include "frontend/torchscript/Importer.h"
#include "ir/Text.h"
#include "ir/Verifier.h"
#include "ir/training/TrainingStep.h"
#include "runtime/OutputFile.h"
#include "sgc/sgc.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace sgc::driver {

static bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Expected<std::map<std::string, ir::Type>> parseInputTypes(const std::string& s) {
  std::map<std::string, ir::Type> out;
  size_t at = 0;
  while (at < s.size()) {
    size_t eq = s.find('=', at), open = eq == std::string::npos ? eq : s.find('[', eq), close = open == std::string::npos ? open : s.find(']', open);
    auto bad = [&] { return makeError("--input-type " + s + ": expected NAME=DTYPE[D0,D1,...] entries separated by commas (e.g. input_ids=i64[2,16])"); };
    if (close == std::string::npos || eq == at) return bad();
    auto dtype = ir::dtypeFromName(s.substr(eq + 1, open - eq - 1));
    if (!dtype) return makeError("--input-type: '" + s.substr(eq + 1, open - eq - 1) + "' is not a dtype (f32, i64, bf16, ...)");
    std::vector<int64_t> dims;
    std::string body = s.substr(open + 1, close - open - 1);
    for (size_t p = 0; p < body.size();) {
      size_t comma = body.find(',', p);
      std::string d = body.substr(p, comma == std::string::npos ? std::string::npos : comma - p);
      char* end = nullptr;
      long long v = strtoll(d.c_str(), &end, 10);
      if (d.empty() || *end || v < 0 || v > (1LL << 40)) return bad();
      dims.push_back(v);
      p = comma == std::string::npos ? body.size() : comma + 1;
    }
    out[s.substr(at, eq - at)] = ir::Type::of(*dtype, dims);
    at = close + 1;
    if (at < s.size() && s[at] != ',') return bad();
    ++at;
  }
  return out;
}

Expected<std::unique_ptr<ir::Graph>> loadModel(const std::string& path, const std::string& inputTypes) {
  if (ts_import::isArchivePath(path)) {
    auto types = parseInputTypes(inputTypes);
    if (!types) return types.takeError();
    return ts_import::importArchive(path, {*types});
  }
  if (!inputTypes.empty()) return makeError(path + ": --input-type applies to TorchScript archives (.pt)");
  if (!endsWith(path, ".sgcir")) return onnx_import::importModel(path);
  std::ifstream f(path);
  if (!f) return makeError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  auto g = ir::parse(ss.str(), path, {true});
  if (!g) return g.takeError();
  if (Error e = ir::verify(**g)) return makeError(path + ": " + errorText(std::move(e)));
  return g;
}

Expected<ir::Tensor> fromSafetensors(const rt::StTensor& t, const std::string& what) {
  auto d = ir::dtypeFromSafetensors(t.dtype);
  if (!d) return makeError(what + ": unsupported dtype " + t.dtype);
  ir::Tensor r;
  r.dtype = *d;
  r.shape = t.shape;
  r.bytes = t.data;
  return r;
}

rt::StTensor toSafetensors(const ir::Tensor& t) {
  return rt::StTensor{std::string(ir::dtypeSafetensorsName(t.dtype)), t.shape, t.bytes};
}

Error saveCheckpoint(const ir::Graph& g, const std::string& path, bool paramsOnly) {
  rt::StFile file;
  for (const auto* list : {&g.params, &g.state})
    if (!paramsOnly || list == &g.params)
      for (const ir::Value* v : *list) file[v->name] = toSafetensors(*v->data);
  std::string error;
  if (!rt::writeSafetensors(path, file, error)) return makeError(error);
  return Error::success();
}

Error loadCheckpoint(ir::Graph& g, const std::string& path) {
  rt::StFile file;
  std::string error;
  if (!rt::readSafetensors(path, file, error)) return makeError(error);
  std::map<ir::Value*, ir::Tensor> loaded;
  for (const auto* list : {&g.params, &g.state})
    for (ir::Value* v : *list) {
      auto it = file.find(v->name);
      if (it == file.end()) return makeError(path + ": no tensor '" + v->name + "' (the checkpoint is not of this model)");
      auto t = fromSafetensors(it->second, path + ": tensor '" + v->name + "'");
      if (!t) return t.takeError();
      if (t->dtype != v->data->dtype || t->shape != v->data->shape)
        return makeError(path + ": tensor '" + v->name + "' is " + ir::toString(ir::Type::of(t->dtype, t->shape)) + ", expected " +
                         ir::toString(v->type));
      if (v->name == ir::kStepState && (t->getI(0) < 0 || t->getI(0) > SGC_MAX_STEP))
        return makeError(path + ": sgc.step is " + std::to_string(t->getI(0)) + ": a step count is from 0 to 2^53");
      loaded[v] = std::move(*t);
    }
  if (loaded.size() != file.size()) return makeError(path + ": holds tensors the model does not have");
  for (auto& [v, t] : loaded) v->data = std::make_shared<const ir::Tensor>(std::move(t));
  return Error::success();
}

Error checkSavePath(const std::string& path, const std::vector<std::string>& inputs, const std::string& flag) {
  std::string target = rt::outputTarget(path), folder = rt::folderOf(target);
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) return makeError(flag + " " + path + ": the folder " + folder + " does not exist");
  for (const std::string& in : inputs)
    if (rt::sameFile(target, in)) return makeError(flag + " " + path + ": is " + in + ", which this run reads; write elsewhere");
  return Error::success();
}

void warnCopiedParameters(const ir::Graph& g, const std::string& model) {
  std::set<const ir::Value*> params(g.params.begin(), g.params.end());
  std::vector<std::string> copies;
  for (const auto& n : g.nodes())
    if (n->op == ir::Op::Identity && params.count(n->input(0))) copies.push_back(n->outputs[0]->name + " = " + n->input(0)->name);
  if (copies.empty()) return;
  std::string shown;
  for (size_t i = 0; i < copies.size() && i < 3; ++i) shown += (i ? ", " : "") + copies[i];
  fprintf(stderr,
          "sgc: warning: %s: %zu values are Identity copies of a parameter (%s%s) and train as that one parameter; "
          "torch.onnx.export merges initializers of equal value unless it exports in training mode "
          "(training=torch.onnx.TrainingMode.TRAINING)\n",
          model.c_str(), copies.size(), shown.c_str(), copies.size() > 3 ? ", ..." : "");
}

int reportError(const std::string& msg) {
  fprintf(stderr, "sgc: error: %s\n", msg.c_str());
  return 1;
}

int reportError(Error e) { return reportError(errorText(std::move(e))); }

std::optional<Args> parseCommand(const CommandSpec& spec, int argc, char** argv, const char* what, int& exitStatus) {
  bool help = false;
  auto args = Args::parse(spec, argc, argv, help);
  exitStatus = help ? 0 : 2;
  if (args && args->positional().size() != 1) {
    exitStatus = reportError(spec.name + " takes " + what + " (see sgc " + spec.name + " --help)");
    return std::nullopt;
  }
  return args;
}

std::string withCommas(int64_t n) {
  std::string s = std::to_string(n), r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0 && s[i - 1] != '-') r += ',';
    r += s[i];
  }
  return r;
}

} // namespace sgc::driver
