// Parsing and checking of the program description (see Program.h).
#include "runtime/Program.h"

#include "runtime/Safetensors.h"

#include <nlohmann/json.hpp>

namespace sgc::rt {
namespace {

bool fail(std::string& error, const std::string& msg) {
  error = "the compiled program is malformed: " + msg;
  return false;
}

TensorKind kindOf(const std::string& k) {
  if (k == "input") return TensorKind::Input;
  if (k == "param") return TensorKind::Param;
  if (k == "state") return TensorKind::State;
  if (k == "const") return TensorKind::Const;
  return TensorKind::Result;
}

bool parseTensors(const nlohmann::json& j, Program& p, std::string& error) {
  for (const auto& t : j.at("tensors")) {
    TensorDesc d{t.at("name"), kindOf(t.at("kind")), t.at("region"), t.at("offset"), t.at("bytes"), t.at("dtype"), t.at("shape")};
    if (d.region < 0 || d.region >= kNumRegions) return fail(error, "tensor " + d.name + " has no valid region");
    if (d.offset > p.regions[d.region] || d.bytes > p.regions[d.region] - d.offset) return fail(error, "tensor " + d.name + " leaves its region");
    uint64_t numel = 1;
    for (int64_t s : d.shape) {
      if (s < 0) return fail(error, "tensor " + d.name + " has a negative dim");
      numel *= (uint64_t)s;
    }
    if (stDTypeSize(d.dtype) == 0 || numel * stDTypeSize(d.dtype) != d.bytes) return fail(error, "tensor " + d.name + " has inconsistent size");
    p.tensors.push_back(std::move(d));
  }
  return true;
}

bool validTensor(const Program& p, int id) { return id >= 0 && id < (int)p.tensors.size(); }

} // namespace

bool parseProgram(const char* json, size_t size, uint64_t weightsBytes, Program& p, std::string& error) {
  nlohmann::json j = nlohmann::json::parse(json, json + size, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return fail(error, "not JSON");
  try {
    p.abi = j.at("abi");
    p.hash = j.at("hash");
    p.alignment = j.at("alignment");
    p.numKernels = j.at("kernels");
    p.kernelNames = j.at("kernel_names").get<std::vector<std::string>>();
    if ((int)p.kernelNames.size() != p.numKernels) return fail(error, "kernel names do not match the kernel count");
    auto regions = j.at("regions");
    if (regions.size() != kNumRegions) return fail(error, "wrong number of regions");
    for (int r = 0; r < kNumRegions; ++r) p.regions[r] = regions[r];
    if (!parseTensors(j, p, error)) return false;
    for (const auto& l : j.at("launches")) {
      Launch L{l.at("kernel"), l.at("serial"), l.at("forward"), l.at("extent"), l.at("args")};
      if (L.kernel < 0 || L.kernel >= p.numKernels || L.extent < 0) return fail(error, "a launch names no kernel");
      for (int a : L.args)
        if (!validTensor(p, a)) return fail(error, "a launch names no tensor");
      p.launches.push_back(std::move(L));
    }
    for (const auto& u : j.at("updates")) {
      int t = u.at(0), s = u.at(1);
      if (!validTensor(p, t) || !validTensor(p, s) || p.tensors[t].bytes != p.tensors[s].bytes) return fail(error, "a bad update");
      p.updates.push_back({t, s});
    }
    for (const auto& w : j.at("weights")) {
      int t = w.at(0);
      uint64_t off = w.at(1);
      if (!validTensor(p, t) || off > weightsBytes || p.tensors[t].bytes > weightsBytes - off) return fail(error, "weights out of range");
      p.weights.push_back({t, off});
    }
    p.loss = j.at("loss");
    p.lr = j.at("lr");
    p.step = j.at("step");
    p.lrDefault = j.at("lr_default");
    p.weightsMode = j.at("weights_mode");
    p.weightsFile = j.at("weights_file");
    if (p.weightsMode != "embedded" && p.weightsMode != "external" && p.weightsMode != "none") return fail(error, "unknown weights mode");
    if (p.weightsFile.find('/') != std::string::npos) return fail(error, "the weights file must be a name beside the library");
    if (!validTensor(p, p.loss) || !validTensor(p, p.lr) || !validTensor(p, p.step)) return fail(error, "no loss, lr or step");
  } catch (const nlohmann::json::exception& e) {
    return fail(error, e.what());
  }
  return true;
}

} // namespace sgc::rt
