// The NCCL communicator (see Comm.h). libnccl.so.2 is dlopened; the
// communicator is created non-blocking, so neither its creation nor a
// collective can hang the host: waits poll the device stream and
// ncclCommGetAsyncError until the time-out, then abort the communicator.
#include "runtime/Comm.h"

#include "runtime/Cuda.h"
#include "runtime/NcclApi.h"
#include "runtime/LoadOnce.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <thread>

namespace sgc::rt {
namespace {

using namespace nccl;

struct NcclApi {
  void* lib = nullptr;
  Result (*getUniqueId)(void*);
  Result (*initRankConfig)(void**, int, NcclId, int, Config*);
  Result (*allReduce)(const void*, void*, size_t, int, int, void*, void*);
  Result (*allGather)(const void*, void*, size_t, int, void*, void*);
  Result (*reduceScatter)(const void*, void*, size_t, int, int, void*, void*);
  Result (*groupStart)();
  Result (*groupEnd)();
  Result (*getAsyncError)(void*, Result*);
  Result (*finalize)(void*);
  Result (*abort)(void*);
  Result (*destroy)(void*);
  const char* (*errorString)(Result);

  bool load(std::string& error) {
    lib = openFirst("SGC_NCCL", {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"});
    if (!lib) {
      error = "libnccl.so.2 cannot be loaded (set SGC_NCCL to its path)";
      return false;
    }
    return resolveAll(lib,
                      {{"ncclGetUniqueId", (void**)&getUniqueId}, {"ncclCommInitRankConfig", (void**)&initRankConfig},
                       {"ncclAllReduce", (void**)&allReduce}, {"ncclAllGather", (void**)&allGather},
                       {"ncclReduceScatter", (void**)&reduceScatter}, {"ncclGroupStart", (void**)&groupStart},
                       {"ncclGroupEnd", (void**)&groupEnd}, {"ncclCommGetAsyncError", (void**)&getAsyncError},
                       {"ncclCommFinalize", (void**)&finalize}, {"ncclCommAbort", (void**)&abort}, {"ncclCommDestroy", (void**)&destroy},
                       {"ncclGetErrorString", (void**)&errorString}},
                      "libnccl.so.2 (NCCL 2.18 or newer is needed)", error);
  }
};

class NcclCommunicator : public Communicator {
public:
  NcclCommunicator(const NcclApi& api, CudaDevice& gpu, int timeoutMs) : api_(api), gpu_(gpu), timeoutMs_(timeoutMs) {}
  ~NcclCommunicator() override {
    if (!comm_) return;
    // Finalizing is collective and, non-blocking, runs on after the call: settle it (bounded) before
    // the communicator and then the device go; a failed or timed-out one is aborted instead.
    std::string ignored;
    if (!failed() && settle("ncclCommFinalize", api_.finalize(comm_), ignored)) api_.destroy(comm_);
    else api_.abort(comm_);
  }

  bool init(int rank, int size, const NcclId& id, std::string& error) {
    rank_ = rank;
    size_ = size;
    Config config;
    Result r = api_.initRankConfig(&comm_, size, id, rank, &config);
    if (r != kSuccess && r != kInProgress) return breakWith("ncclCommInitRankConfig", r, error);
    return settle("creating the NCCL communicator", kInProgress, error, ": a peer rank is missing");
  }

  bool start(const std::vector<Span>& spans, bool average, int& handle, std::string& error) override {
    if (failed()) return fail(broken_, error);
    Result r = api_.groupStart();
    for (const Span& s : spans) {
      if (r != kSuccess && r != kInProgress) break;
      r = api_.allReduce((const void*)s.address, (void*)s.address, s.count, typeOf(s), average ? kAvg : kSum, comm_, gpu_.commStream());
    }
    Result end = api_.groupEnd();
    if (r != kSuccess && r != kInProgress) return breakWith("ncclAllReduce", r, error);
    handle = 0;
    return settle("ncclGroupEnd", end, error);
  }

  bool startReduceScatter(const Span& in, const Span& out, bool average, int& handle, std::string& error) override {
    if (failed()) return fail(broken_, error);
    Result r = api_.reduceScatter((const void*)in.address, (void*)out.address, out.count, typeOf(out), average ? kAvg : kSum, comm_,
                                  gpu_.commStream());
    handle = 0;
    return settle("ncclReduceScatter", r, error);
  }

  bool startAllGather(const Span& in, const Span& out, int& handle, std::string& error) override {
    if (failed()) return fail(broken_, error);
    Result r = api_.allGather((const void*)in.address, (void*)out.address, in.count, typeOf(in), comm_, gpu_.commStream());
    handle = 0;
    return settle("ncclAllGather", r, error);
  }

  /// The collectives are ordered on the GPU (GpuStep's events); the host waits in idle().
  bool wait(int, std::string& error) override { return !failed() || fail(broken_, error); }

  bool allGather(const std::string& mine, std::vector<std::string>& all, std::string& error) override {
    uint64_t len = mine.size(), scratch = gpu_.scratch(len * (uint64_t)size_, error);
    if (!scratch || !gpu_.toDevice(scratch + (uint64_t)rank_ * len, mine.data(), len, error) || !gpu_.commFork(error)) return false;
    Result r = api_.allGather((const void*)(scratch + (uint64_t)rank_ * len), (void*)scratch, len, kUint8, comm_, gpu_.commStream());
    if (!settle("ncclAllGather", r, error)) return false;
    std::string gathered(len * (size_t)size_, '\0');
    if (!gpu_.commDone(0, error) || !gpu_.waitComm(0, error) || !idle(error) || !gpu_.toHost(gathered.data(), scratch, gathered.size(), error)) return false;
    all.clear();
    for (int q = 0; q < size_; ++q) all.push_back(gathered.substr((size_t)q * len, len));
    return true;
  }

  bool idle(std::string& error) override {
    auto healthy = [&](std::string& why) {
      Result state = kSuccess;
      api_.getAsyncError(comm_, &state);
      if (state == kSuccess || state == kInProgress) return true;
      return breakWith("NCCL", state, why);
    };
    if (gpu_.waitIdle(timeoutMs_, healthy, error)) return true;
    if (!failed()) breakWith(error + " (a peer rank exited or stopped answering)", error);
    return false;
  }

private:
  /// A non-blocking call's result: when in progress, polls the communicator's state (a call may be
  /// issued only once the previous one has left ncclInProgress) until done, failed or timed out.
  bool settle(const std::string& what, Result r, std::string& error, const char* missing = ": a peer rank stopped answering") {
    if (r != kSuccess && r != kInProgress) return breakWith(what.c_str(), r, error);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs_);
    for (Result state = r; state == kInProgress;) {
      api_.getAsyncError(comm_, &state);
      if (state != kSuccess && state != kInProgress) return breakWith(what.c_str(), state, error);
      if (state == kInProgress && std::chrono::steady_clock::now() > deadline)
        return breakWith(what + " did not finish within " + std::to_string(timeoutMs_) + " ms" + missing, error);
      if (state == kInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return true;
  }
  static int typeOf(const Span& s) { return s.dtype == "F32" ? kFloat32 : s.dtype == "F64" ? kFloat64 : kBfloat16; }
  static bool fail(const std::string& msg, std::string& error) {
    error = msg;
    return false;
  }
  bool breakWith(const std::string& msg, std::string& error) {
    broken_ = msg;
    return fail(msg, error);
  }
  bool breakWith(const char* what, Result r, std::string& error) { return breakWith(std::string(what) + " failed: " + api_.errorString(r), error); }

  const NcclApi& api_;
  CudaDevice& gpu_;
  int timeoutMs_;
  void* comm_ = nullptr;
};

} // namespace

bool ncclUniqueId(NcclId& id, std::string& error) {
  const NcclApi* api = loadOnce<NcclApi>(error);
  if (!api) return false;
  if (Result r = api->getUniqueId(&id)) {
    error = std::string("ncclGetUniqueId failed: ") + api->errorString(r);
    return false;
  }
  return true;
}

std::unique_ptr<Communicator> openNccl(CudaDevice& gpu, int rank, int size, const NcclId& id, int timeoutMs, std::string& error) {
  const NcclApi* api = loadOnce<NcclApi>(error);
  if (!api || !gpu.openCommStream(error)) return nullptr;
  auto c = std::make_unique<NcclCommunicator>(*api, gpu, timeoutMs);
  if (!c->init(rank, size, id, error)) return nullptr;
  return c;
}

} // namespace sgc::rt
