// Token-count buckets of a decode step (see DecodeBuckets.h).
#include "codegen/DecodeBuckets.h"

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

/// The parameters and state (the cache) of `bucket` lie where `main`'s of the same name do.
Error checkShared(const nlohmann::json& main, const nlohmann::json& bucket) {
  std::map<std::string, const nlohmann::json*> byName;
  for (const nlohmann::json& t : main.at("tensors")) byName[t.at("name")] = &t;
  for (int r : {1, 2}) // params, state
    if (main.at("regions")[r] != bucket.at("regions")[r])
      return makeError("internal error: a token bucket's region " + std::to_string(r) + " differs from the main step's");
  for (const nlohmann::json& t : bucket.at("tensors")) {
    std::string kind = t.at("kind");
    if (kind != "param" && kind != "state") continue;
    auto it = byName.find(t.at("name"));
    const char* fields[] = {"kind", "region", "offset", "bytes", "dtype", "shape"};
    bool same = it != byName.end();
    for (const char* f : fields) same = same && (*it->second).at(f) == t.at(f);
    if (!same) return makeError("internal error: a token bucket places %" + t.at("name").get<std::string>() + " apart from the main step");
  }
  return Error::success();
}

} // namespace

Error addDecodeBucket(CompiledProgram& main, CompiledProgram bucket) {
  nlohmann::json mainJson = nlohmann::json::parse(main.programJson), b = nlohmann::json::parse(bucket.programJson);
  if (Error e = checkShared(mainJson, b)) return e;
  std::string tokens = std::to_string(b.at("decode").at("tokens").get<int64_t>());
  std::map<std::string, int> byContent;
  for (size_t i = 0; i < main.kernels.size(); ++i) byContent.emplace(kir::contentKey(main.kernels[i]), (int)i);
  std::vector<int> index;
  for (kir::Kernel& k : bucket.kernels) {
    auto [it, fresh] = byContent.try_emplace(kir::contentKey(k), (int)main.kernels.size());
    index.push_back(it->second);
    if (!fresh) continue;
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
  main.programJson = mainJson.dump();
  main.gemms += bucket.gemms, main.gemmEpilogues += bucket.gemmEpilogues, main.gpuForms += bucket.gpuForms;
  return Error::success();
}

} // namespace sgc::codegen
