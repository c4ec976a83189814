// The MPI communicator (see Comm.h). OpenMPI's libmpi.so.40 is dlopened,
// so a train.so needs no MPI to load; its handles (MPI_COMM_WORLD, MPI_FLOAT,
// MPI_SUM, ...) are the addresses of OpenMPI's predefined objects, found by
// name. Collectives are non-blocking (MPI_Iallreduce), and waits poll
// MPI_Test until the time-out.
#include "runtime/Comm.h"

#include "runtime/LoadOnce.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <thread>

namespace sgc::rt {
namespace {

using Handle = void*; // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Errhandler: pointers in OpenMPI
constexpr int kThreadSerialized = 2; // MPI_THREAD_SERIALIZED
void* const kInPlace = (void*)1;     // MPI_IN_PLACE

struct MpiApi {
  void* lib = nullptr;
  int (*initialized)(int*);
  int (*finalized)(int*);
  int (*initThread)(int*, char***, int, int*);
  int (*finalize)();
  int (*commRank)(Handle, int*);
  int (*commSize)(Handle, int*);
  int (*commIdup)(Handle, Handle*, Handle*);
  int (*setErrhandler)(Handle, Handle);
  int (*iallreduce)(const void*, void*, int, Handle, Handle, Handle, Handle*);
  int (*iallgather)(const void*, int, Handle, void*, int, Handle, Handle, Handle*);
  int (*ireduceScatterBlock)(const void*, void*, int, Handle, Handle, Handle, Handle*);
  int (*test)(Handle*, int*, void*);
  int (*errorString)(int, char*, int*);
  Handle world, floatType, doubleType, charType, sum, errorsReturn;

  bool load(std::string& error) {
    const char* env = std::getenv("SGC_MPI");
    std::string name = env ? env : "libmpi.so.40";
    // RTLD_GLOBAL: OpenMPI's own plugins resolve libmpi's symbols through the global scope.
    if (!(lib = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL))) {
      error = name + " cannot be loaded (install OpenMPI, or set SGC_MPI to its libmpi): " + dlerror();
      return false;
    }
    return resolveAll(lib,
                      {{"MPI_Initialized", (void**)&initialized}, {"MPI_Finalized", (void**)&finalized},
                       {"MPI_Init_thread", (void**)&initThread}, {"MPI_Finalize", (void**)&finalize}, {"MPI_Comm_rank", (void**)&commRank},
                       {"MPI_Comm_size", (void**)&commSize}, {"MPI_Comm_idup", (void**)&commIdup}, {"MPI_Comm_set_errhandler", (void**)&setErrhandler},
                       {"MPI_Iallreduce", (void**)&iallreduce}, {"MPI_Iallgather", (void**)&iallgather},
                       {"MPI_Ireduce_scatter_block", (void**)&ireduceScatterBlock}, {"MPI_Test", (void**)&test},
                       {"MPI_Error_string", (void**)&errorString}, {"ompi_mpi_comm_world", &world}, {"ompi_mpi_float", &floatType},
                       {"ompi_mpi_double", &doubleType}, {"ompi_mpi_char", &charType}, {"ompi_mpi_op_sum", &sum},
                       {"ompi_mpi_errors_return", &errorsReturn}},
                      name + " (sgc speaks OpenMPI's ABI)", error);
  }
};

/// Whether any communicator failed: then MPI is not finalized at exit (a dead peer would hang it).
bool failedOnce = false;
bool initializedHere = false;

void finalizeAtExit() {
  std::string ignored;
  const MpiApi* api = loadOnce<MpiApi>(ignored);
  int done = 1;
  if (api && !failedOnce && api->finalized(&done) == 0 && !done) api->finalize();
}

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(const MpiApi& api, int timeoutMs) : api_(api), timeoutMs_(timeoutMs) {}

  bool init(std::string& error) {
    int ready = 0;
    if (api_.initialized(&ready) != 0) return fail("MPI_Initialized failed", error);
    if (!ready) {
      int provided = 0;
      if (api_.initThread(nullptr, nullptr, kThreadSerialized, &provided) != 0) return fail("MPI_Init_thread failed", error);
      if (!initializedHere) std::atexit(finalizeAtExit);
      initializedHere = true;
    }
    // A communicator of our own (the host's MPI_COMM_WORLD keeps its error handler and traffic),
    // whose errors return instead of aborting the process; duplicated without blocking, so a
    // missing peer times out.
    std::vector<Handle> request(1);
    if (int rc = api_.commIdup(api_.world, &comm_, &request[0])) return fail(message("MPI_Comm_idup", rc), error);
    if (!waitAll(request, "joining the other ranks", error)) return false;
    if (int rc = api_.setErrhandler(comm_, api_.errorsReturn)) return fail(message("MPI_Comm_set_errhandler", rc), error);
    if (int rc = api_.commRank(comm_, &rank_)) return fail(message("MPI_Comm_rank", rc), error);
    if (int rc = api_.commSize(comm_, &size_)) return fail(message("MPI_Comm_size", rc), error);
    return true;
  }

  bool start(const std::vector<Span>& spans, bool average, int& handle, std::string& error) override {
    Pending p{{}, spans, average};
    for (const Span& s : spans)
      for (uint64_t at = 0, chunk = uint64_t(1) << 30; at < s.count; at += chunk) { // MPI counts are ints
        Span part{s.address + at * (s.dtype == "F64" ? 8 : 4), std::min(chunk, s.count - at), s.dtype};
        Handle type = typeOf(part, error), request = nullptr;
        if (!type) return false;
        if (int rc = api_.iallreduce(kInPlace, (void*)part.address, (int)part.count, type, api_.sum, comm_, &request))
          return breakWith(message("MPI_Iallreduce", rc), error);
        p.requests.push_back(request);
      }
    return track(std::move(p), handle);
  }

  bool startReduceScatter(const Span& in, const Span& out, bool average, int& handle, std::string& error) override {
    Handle type = typeOf(out, error), request = nullptr;
    if (!type) return false;
    if (int rc = api_.ireduceScatterBlock((void*)in.address, (void*)out.address, (int)out.count, type, api_.sum, comm_, &request))
      return breakWith(message("MPI_Ireduce_scatter_block", rc), error);
    return track(Pending{{request}, average ? std::vector<Span>{out} : std::vector<Span>{}, average}, handle);
  }

  bool startAllGather(const Span& in, const Span& out, int& handle, std::string& error) override {
    Handle type = typeOf(in, error), request = nullptr;
    if (!type) return false;
    if (int rc = api_.iallgather((void*)in.address, (int)in.count, type, (void*)out.address, (int)in.count, type, comm_, &request))
      return breakWith(message("MPI_Iallgather", rc), error);
    return track(Pending{{request}, {}, false}, handle);
  }

  bool wait(int handle, std::string& error) override {
    auto it = pending_.find(handle);
    if (it == pending_.end()) return fail("no collective " + std::to_string(handle) + " is pending", error);
    Pending p = std::move(it->second);
    pending_.erase(it);
    if (!broken_.empty()) return fail(broken_, error);
    if (!waitAll(p.requests, "an all-reduce", error)) return false;
    if (p.average && size_ > 1)
      for (const Span& s : p.spans) {
        if (s.dtype == "F32") scale((float*)s.address, s.count, 1.0f / (float)size_);
        else scale((double*)s.address, s.count, 1.0 / size_);
      }
    return true;
  }

  bool allGather(const std::string& mine, std::vector<std::string>& all, std::string& error) override {
    if (!broken_.empty()) return fail(broken_, error);
    std::string gathered(mine.size() * (size_t)size_, '\0');
    std::vector<Handle> request(1);
    if (int rc = api_.iallgather(mine.data(), (int)mine.size(), api_.charType, gathered.data(), (int)mine.size(), api_.charType, comm_,
                                 &request[0]))
      return breakWith(message("MPI_Iallgather", rc), error);
    if (!waitAll(request, "gathering the ranks' program hashes", error)) return false;
    all.clear();
    for (int r = 0; r < size_; ++r) all.push_back(gathered.substr((size_t)r * mine.size(), mine.size()));
    return true;
  }

private:
  struct Pending {
    std::vector<Handle> requests;
    std::vector<Span> spans;
    bool average;
  };

  /// The MPI datatype of a span of fewer than 2^31 elements (MPI counts are ints).
  Handle typeOf(const Span& s, std::string& error) {
    Handle type = s.dtype == "F32" ? api_.floatType : s.dtype == "F64" ? api_.doubleType : nullptr;
    if (!failed() && type && s.count < (uint64_t(1) << 31)) return type;
    fail(failed() ? broken_ : "MPI reduces f32 and f64 tensors of fewer than 2^31 elements, not " + s.dtype + "[" + std::to_string(s.count) + "]", error);
    return nullptr;
  }

  bool track(Pending p, int& handle) {
    handle = next_++;
    pending_[handle] = std::move(p);
    return true;
  }

  template <class T>
  static void scale(T* x, uint64_t n, T by) {
    for (uint64_t i = 0; i < n; ++i) x[i] *= by;
  }

  bool waitAll(std::vector<Handle>& requests, const char* what, std::string& error) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs_);
    for (Handle& r : requests) {
      int done = 0;
      while (!done) {
        if (int rc = api_.test(&r, &done, nullptr)) return breakWith(message("MPI_Test", rc), error);
        if (done) break;
        if (std::chrono::steady_clock::now() > deadline)
          return breakWith(std::string(what) + " did not finish within " + std::to_string(timeoutMs_) +
                               " ms: a peer rank exited or stopped answering",
                           error);
        std::this_thread::yield();
      }
    }
    return true;
  }

  std::string message(const char* call, int rc) const {
    char text[512];
    int len = 0;
    if (api_.errorString(rc, text, &len) != 0) len = 0;
    return std::string(call) + " failed: " + std::string(text, (size_t)std::max(0, std::min(len, (int)sizeof text)));
  }

  static bool fail(const std::string& msg, std::string& error) {
    error = msg;
    return false;
  }
  bool breakWith(const std::string& msg, std::string& error) {
    broken_ = msg;
    failedOnce = true;
    return fail(broken_, error);
  }

  const MpiApi& api_;
  Handle comm_ = nullptr; ///< a duplicate of MPI_COMM_WORLD (not freed: freeing is collective, and a peer may be gone)
  int timeoutMs_;
  int next_ = 0;
  std::map<int, Pending> pending_;
};

} // namespace

std::unique_ptr<Communicator> openMpi(int timeoutMs, std::string& error) {
  const MpiApi* api = loadOnce<MpiApi>(error);
  if (!api) return nullptr;
  auto c = std::make_unique<MpiCommunicator>(*api, timeoutMs);
  if (!c->init(error)) return nullptr;
  return c;
}

} // namespace sgc::rt
