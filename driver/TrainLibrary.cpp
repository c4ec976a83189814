// sgc train MODEL.so: a thin host over the C ABI of a compiled model. It
// dlopens the library, feeds it the data one batch per step through
// sgc_set_input and prints the same JSON lines as training on the
// interpreter.
#include "driver/Args.h"
#include "driver/Common.h"
#include "driver/TrainingFlags.h"

#include "sgc/sgc.h"

#include <cmath>
#include <cstdio>
#include <dlfcn.h>

namespace sgc::driver {
namespace {

/// The C ABI, resolved from the library.
struct Api {
  void* handle = nullptr;
#define SGC_FN(name) decltype(&::name) name = nullptr;
  SGC_FN(sgc_abi_version) SGC_FN(sgc_last_error) SGC_FN(sgc_session_create) SGC_FN(sgc_session_destroy)
  SGC_FN(sgc_tensor_count) SGC_FN(sgc_tensor_info) SGC_FN(sgc_set_input) SGC_FN(sgc_set_learning_rate)
  SGC_FN(sgc_train_step) SGC_FN(sgc_get_tensor) SGC_FN(sgc_save) SGC_FN(sgc_load)
#undef SGC_FN
  ~Api() {
    if (handle) dlclose(handle);
  }
};

Error loadApi(const std::string& path, Api& api) {
  std::string p = path.find('/') == std::string::npos ? "./" + path : path; // never search the library path
  api.handle = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.handle) return makeError(path + ": cannot load: " + dlerror());
#define SGC_FN(name)                                                                        \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.handle, #name));               \
  if (!api.name) return makeError(path + ": not a model compiled by sgc (no " #name ")");
  SGC_FN(sgc_abi_version) SGC_FN(sgc_last_error) SGC_FN(sgc_session_create) SGC_FN(sgc_session_destroy)
  SGC_FN(sgc_tensor_count) SGC_FN(sgc_tensor_info) SGC_FN(sgc_set_input) SGC_FN(sgc_set_learning_rate)
  SGC_FN(sgc_train_step) SGC_FN(sgc_get_tensor) SGC_FN(sgc_save) SGC_FN(sgc_load)
#undef SGC_FN
  if (api.sgc_abi_version() != SGC_ABI_VERSION)
    return makeError(path + ": ABI version " + std::to_string(api.sgc_abi_version()) + ", this sgc speaks " + std::to_string(SGC_ABI_VERSION));
  return Error::success();
}

/// The safetensors name of a DLPack dtype ("" when sgc has none).
std::string safetensorsName(DLDataType t) {
  std::string bits = std::to_string(t.bits);
  if (t.code == kDLFloat) return "F" + bits;
  if (t.code == kDLBfloat) return "BF16";
  if (t.code == kDLInt) return "I" + bits;
  if (t.code == kDLUInt) return "U" + bits;
  return "";
}

struct Input {
  std::string name;
  rt::StTensor data; ///< stacked batches
  std::vector<int64_t> shape; ///< one batch
  DLDataType dtype;
};

} // namespace

int trainLibrary(const std::string& path, const Args& args, int64_t steps) {
  Api api;
  if (Error e = loadApi(path, api)) return reportError(std::move(e));
  std::string device = args.get("device", "cpu");
  sgc_session_options o = SGC_SESSION_OPTIONS_INIT;
  o.device = device.c_str();
  auto threads = numberFlag(args, "threads", 0);
  if (!threads || *threads < 0) return reportError("--threads expects a non-negative number");
  o.num_threads = (int32_t)*threads;
  sgc_session* s = nullptr;
  if (api.sgc_session_create(&o, &s)) return reportError(path + ": " + api.sgc_last_error());
  std::unique_ptr<sgc_session, decltype(api.sgc_session_destroy)> session(s, api.sgc_session_destroy);
  auto check = [&](sgc_status st) { return st ? reportError(path + ": " + api.sgc_last_error()) : 0; };
  if (args.has("load"))
    if (int r = check(api.sgc_load(s, args.get("load").c_str()))) return r;
  if (args.has("lr")) {
    auto lr = numberFlag(args, "lr", 0);
    if (!lr) return reportError(lr.takeError());
    if (int r = check(api.sgc_set_learning_rate(s, *lr))) return r;
  }
  rt::StFile file;
  std::string error;
  if (!rt::readSafetensors(args.get("data"), file, error)) return reportError(error);
  int32_t count = 0;
  api.sgc_tensor_count(s, SGC_TENSOR_INPUT, &count);
  std::vector<Input> inputs;
  int64_t batches = -1;
  for (int32_t i = 0; i < count; ++i) {
    const char* name;
    int32_t ndim;
    const int64_t* shape;
    DLDataType dtype;
    api.sgc_tensor_info(s, SGC_TENSOR_INPUT, i, &name, &dtype, &ndim, &shape);
    auto it = file.find(name);
    if (it == file.end()) return reportError(args.get("data") + ": no tensor for model input '" + name + "'");
    const rt::StTensor& t = it->second;
    if (t.shape.empty() || (batches >= 0 && t.shape[0] != batches))
      return reportError(args.get("data") + ": tensor '" + name + "' needs the common leading batch-count dimension");
    batches = t.shape[0];
    std::vector<int64_t> one(shape, shape + ndim);
    std::string want = safetensorsName(dtype);
    if (t.dtype != want && !(t.dtype == "BOOL" && want == "U8"))
      return reportError(args.get("data") + ": tensor '" + name + "' is " + t.dtype + ", the model takes " + want);
    if (std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()) != one)
      return reportError(args.get("data") + ": one batch of '" + name + "' does not have the model's input shape");
    inputs.push_back({name, t, one, dtype});
  }
  if (inputs.size() != file.size()) return reportError(args.get("data") + ": holds tensors that are not inputs of the model");
  int64_t stepCount = 0;
  DLTensor stepT{&stepCount, {kDLCPU, 0}, 0, {kDLInt, 64, 1}, nullptr, nullptr, 0};
  if (int r = check(api.sgc_get_tensor(s, "sgc.step", &stepT))) return r;
  for (int64_t i = stepCount; i < stepCount + steps; ++i) {
    for (Input& in : inputs) {
      size_t bytes = in.data.data.size() / (size_t)batches;
      DLTensor t{in.data.data.data() + (i % batches) * bytes, {kDLCPU, 0}, (int32_t)in.shape.size(), in.dtype, in.shape.data(), nullptr, 0};
      if (int r = check(api.sgc_set_input(s, in.name.c_str(), &t))) return r;
    }
    double loss = 0;
    if (int r = check(api.sgc_train_step(s, &loss))) return r;
    if (int r = reportStep(path, i, loss)) return r;
  }
  if (args.has("save")) return check(api.sgc_save(s, args.get("save").c_str()));
  return 0;
}

} // namespace sgc::driver
