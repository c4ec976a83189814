// sgc train MODEL.so: a thin host over the C ABI of a compiled model. It
// dlopens the library, feeds it the data one batch per step through
// sgc_set_input and prints the same JSON lines as training on the
// interpreter. Run by mpirun, each rank feeds its contiguous share of every
// batch, and rank 0 prints and saves.
#include "driver/Args.h"
#include "driver/Common.h"
#include "driver/LibraryApi.h"
#include "driver/StepReport.h"
#include "driver/TrainingFlags.h"

#include "sgc/sgc.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <cstdlib>
#include <dlfcn.h>
#include <thread>

namespace sgc::driver {
namespace {

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
  std::vector<int64_t> shape; ///< this rank's share of one batch
  DLDataType dtype;
};

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// The communicator --comm asks for: "auto" is MPI when mpirun started this process.
Expected<std::string> communicatorFlag(const Args& args) {
  std::string comm = args.get("comm", "auto");
  if (comm == "auto") return std::string(std::getenv("OMPI_COMM_WORLD_SIZE") ? "mpi" : "none");
  if (comm != "none" && comm != "mpi" && comm != "nccl") return makeError("--comm expects auto, none, mpi or nccl");
  return comm;
}

/// --comm nccl: this rank's place, and the NCCL id, which rank 0 makes and writes to --nccl-id-file
/// (a new path for each run) and the other ranks wait for.
Error ncclFlags(const Args& args, Api& api, sgc_session_options& o, int timeoutMs) {
  auto rank = numberFlag(args, "rank", -1), world = numberFlag(args, "world-size", 0);
  if (!rank || !world || *rank < 0 || *world < 1 || *rank >= *world || !args.has("nccl-id-file"))
    return makeError("--comm nccl needs --rank R --world-size N (0 <= R < N) and --nccl-id-file FILE");
  o.rank = (int32_t)*rank;
  o.world_size = (int32_t)*world;
  std::string file = args.get("nccl-id-file");
  if (o.rank == 0) {
    if (api.sgc_nccl_unique_id(o.nccl_id)) return makeError(api.sgc_last_error());
    std::string tmp = file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    bool ok = f && std::fwrite(o.nccl_id, 1, sizeof o.nccl_id, f) == sizeof o.nccl_id;
    if (f) ok = std::fclose(f) == 0 && ok;
    if (!ok || std::rename(tmp.c_str(), file.c_str()) != 0) return makeError(file + ": cannot write the NCCL id");
    return Error::success();
  }
  for (int waited = 0;; waited += 10) {
    if (FILE* f = std::fopen(file.c_str(), "rb")) {
      size_t got = std::fread(o.nccl_id, 1, sizeof o.nccl_id, f);
      std::fclose(f);
      if (got == sizeof o.nccl_id) return Error::success();
    }
    if (waited > timeoutMs) return makeError(file + ": no NCCL id from rank 0 within the time-out");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

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
  auto comm = communicatorFlag(args);
  if (!comm) return reportError(comm.takeError());
  o.communicator = comm->c_str();
  auto timeout = numberFlag(args, "comm-timeout", 300);
  if (!timeout || !(*timeout > 0) || *timeout > 86400) return reportError("--comm-timeout expects seconds, more than 0 and at most 86400");
  o.timeout_ms = (int32_t)std::ceil(*timeout * 1000);
  if (*comm == "nccl")
    if (Error e = ncclFlags(args, api, o, o.timeout_ms)) return reportError(std::move(e));
  sgc_session* s = nullptr;
  if (api.sgc_session_create(&o, &s)) return reportError(path + ": " + api.sgc_last_error());
  std::unique_ptr<sgc_session, decltype(api.sgc_session_destroy)> session(s, api.sgc_session_destroy);
  int32_t rank = 0, world = 1;
  api.sgc_rank(s, &rank, &world);
  std::string who = world > 1 ? path + " (rank " + std::to_string(rank) + ")" : path;
  auto check = [&](sgc_status st) { return st ? reportError(who + ": " + api.sgc_last_error()) : 0; };
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
    if (batches == 0) return reportError(args.get("data") + ": tensor '" + name + "' holds no batches (its leading dim is 0)");
    std::vector<int64_t> one(shape, shape + ndim);
    std::string want = safetensorsName(dtype);
    if (t.dtype != want && !(t.dtype == "BOOL" && want == "U8"))
      return reportError(args.get("data") + ": tensor '" + name + "' is " + t.dtype + ", the model takes " + want);
    std::vector<int64_t> whole(t.shape.begin() + 1, t.shape.end()); // one batch, all ranks' shares
    if (world > 1 && (whole.empty() || one.empty() || whole[0] != one[0] * world || !std::equal(one.begin() + 1, one.end(), whole.begin() + 1)))
      return reportError(args.get("data") + ": a batch of '" + name + "' is " + shapeText(whole) + "; " + std::to_string(world) +
                         " ranks of a model taking " + shapeText(one) + " need " + std::to_string(world) + " times its leading dim");
    if (world == 1 && whole != one)
      return reportError(args.get("data") + ": one batch of '" + name + "' does not have the model's input shape");
    inputs.push_back({name, t, one, dtype});
  }
  if (inputs.size() != file.size()) return reportError(args.get("data") + ": holds tensors that are not inputs of the model");
  int64_t stepCount = 0;
  DLTensor stepT{&stepCount, {kDLCPU, 0}, 0, {kDLInt, 64, 1}, nullptr, nullptr, 0};
  if (int r = check(api.sgc_get_tensor(s, "sgc.step", &stepT))) return r;
  BatchSize batch; // all ranks' batch
  for (const Input& in : inputs) {
    std::vector<int64_t> whole(in.data.shape.begin() + 1, in.data.shape.end());
    batch.add(whole.data(), (int32_t)whole.size(), in.dtype.code == kDLInt || in.dtype.code == kDLUInt);
  }
  std::optional<StepReport> report;
  if (rank == 0) {
    bool mpi = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); // mpirun gives its ranks a terminal
    report.emplace(path, stepCount, steps, batch.samples, batch.tokens, world == 1 && !mpi);
    uint64_t plan = 0;
    if (api.sgc_memory_plan_bytes) api.sgc_memory_plan_bytes(s, &plan);
    std::string error; // a library's peak is its static plan
    if (args.has("metrics") && !report->metrics(args.get("metrics"), [plan] { return (int64_t)plan; }, error)) return reportError(error);
  }
  for (int64_t i = stepCount; i < stepCount + steps; ++i) {
    for (Input& in : inputs) {
      size_t bytes = in.data.data.size() / (size_t)batches, share = bytes / (size_t)world;
      DLTensor t{in.data.data.data() + (i % batches) * bytes + (size_t)rank * share, {kDLCPU, 0}, (int32_t)in.shape.size(), in.dtype,
                 in.shape.data(), nullptr, 0};
      if (int r = check(api.sgc_set_input(s, in.name.c_str(), &t))) return r;
    }
    if (args.has("trace") && i == stepCount + steps - 1) { // the last step: the others warmed it up
      if (!api.sgc_trace_next_step) return reportError(path + ": this library cannot trace its steps (compiled by an older sgc): compile it again");
      if (int r = check(api.sgc_trace_next_step(s, args.get("trace").c_str()))) return r;
    }
    double loss = 0;
    if (int r = check(api.sgc_train_step(s, &loss))) return r;
    if (rank == 0) {
      if (int r = report->step(i, loss)) return r;
    } else if (!std::isfinite(loss)) { // the same mean loss on every rank: rank 0 says why
      return 1;
    }
  }
  if (args.has("save")) return check(api.sgc_save(s, args.get("save").c_str())); // every rank takes part; rank 0 writes
  return 0;
}

} // namespace sgc::driver
