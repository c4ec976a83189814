// Token-count buckets of a decode step (see DecodeBuckets.h).
#include "codegen/DecodeBuckets.h"

#include "runtime/Program.h"

#include <nlohmann/json.hpp>

#include <map>

namespace sgc::codegen {
namespace {

/// Renumbers every kernel a launch names through `index` (launch, GEMM epilogue, GPU forms).
void remapKernels(nlohmann::json& launches, const std::vector<int>& index) {
  auto remap = [&](nlohmann::json& call) {
    int k = call.at("kernel");
    if (k >= 0) call["kernel"] = index.at(k);
  };
  for (nlohmann::json& l : launches) {
    remap(l);
    if (l.contains("epilogue")) remap(l["epilogue"]);
    if (l.contains("gpu"))
      for (nlohmann::json& c : l["gpu"]) remap(c);
  }
}

} // namespace

Error addDecodeBucket(CompiledProgram& main, CompiledProgram bucket) {
  nlohmann::json mainJson = nlohmann::json::parse(main.programJson), b = nlohmann::json::parse(bucket.programJson);
  std::string tokens = std::to_string(b.at("decode").at("tokens").get<int64_t>());
  std::map<std::string, int> byContent;
  for (size_t i = 0; i < main.kernels.size(); ++i) byContent.emplace(kir::contentKey(main.kernels[i]), (int)i);
  std::vector<int> index;
  for (kir::Kernel& k : bucket.kernels) {
    auto [it, fresh] = byContent.try_emplace(kir::contentKey(k), (int)main.kernels.size());
    index.push_back(it->second);
    if (!fresh) {
      main.kernels[it->second].cpuOnly = main.kernels[it->second].cpuOnly && k.cpuOnly; // a GPU may launch it for either step
      continue;
    }
    k.name = "sgc_t" + tokens + "_" + k.name.substr(4); // sgc_k12 -> sgc_t64_k12
    main.kernels.push_back(std::move(k));
  }
  remapKernels(b["launches"], index);
  for (nlohmann::json& w : b["weights"]) { // its constants, after main's weights
    while (main.weights.size() % 64) main.weights.push_back(0);
    uint64_t from = w.at(1);
    w[1] = main.weights.size();
    uint64_t bytes = b.at("tensors").at(w.at(0).get<int>()).at("bytes");
    main.weights.insert(main.weights.end(), bucket.weights.begin() + (std::ptrdiff_t)from, bucket.weights.begin() + (std::ptrdiff_t)(from + bytes));
  }
  b.erase("kernels"), b.erase("kernel_names"); // the main step's list names them all
  nlohmann::json names = nlohmann::json::array();
  for (const kir::Kernel& k : main.kernels) names.push_back(k.name);
  mainJson["kernels"] = (int)main.kernels.size();
  mainJson["kernel_names"] = names;
  mainJson["buckets"].push_back(std::move(b));
  std::string merged = mainJson.dump(), error;
  rt::Program read; // the runtime's reading checks that the bucket shares the step's parameters and cache
  if (!rt::parseProgram(merged.data(), merged.size(), main.weights.size(), read, error)) return makeError("internal error: token bucket " + tokens + ": " + error);
  main.programJson = std::move(merged);
  main.gemms += bucket.gemms, main.gemmEpilogues += bucket.gemmEpilogues, main.gpuForms += bucket.gpuForms;
  return Error::success();
}

} // namespace sgc::codegen
