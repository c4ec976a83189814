// Communicators for data-parallel training. The all-reduce launches of a
// compiled step (ir/passes/DataParallel.h) run through one of these: MPI
// (OpenMPI's libmpi.so.40, dlopened; host memory) for sessions on the CPU,
// NCCL (libnccl.so.2, dlopened; device memory, on the GPU's communication
// stream) for sessions on a GPU.
// Every wait is bounded by a time-out, so a peer that exits or stops
// answering makes the call fail, never hang; after a failure the
// communicator refuses further work.
#pragma once
#include "runtime/Program.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sgc::rt {

/// `count` consecutive elements of one dtype ("F32", "F64") at `address`.
struct Span {
  uint64_t address;
  uint64_t count;
  std::string dtype;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Whether a collective failed (the communicator then refuses further work).
  bool failed() const { return !broken_.empty(); }
  /// Starts summing each span across the ranks in place (then dividing by the world size when
  /// `average`); `handle` names it for wait. Every rank starts the same collectives in the same order.
  virtual bool start(const std::vector<Span>& spans, bool average, int& handle, std::string& error) = 0;
  /// Starts ZeRO-1's collectives from `in` to `out`: this rank's shard of the sum (or mean) of every
  /// rank's `in` (`in` is world size times `out`); every rank's `in` in rank order.
  virtual bool startReduceScatter(const Span& in, const Span& out, bool average, int& handle, std::string& error) = 0;
  virtual bool startAllGather(const Span& in, const Span& out, int& handle, std::string& error) = 0;
  /// Waits, at most the time-out, until collective `handle` has finished.
  virtual bool wait(int handle, std::string& error) = 0;
  /// Every rank's `mine` (of the same length everywhere), in rank order.
  virtual bool allGather(const std::string& mine, std::vector<std::string>& all, std::string& error) = 0;
  /// Waits, at most the time-out, until the device has run all it was given (NCCL; MPI: nothing to do).
  virtual bool idle(std::string&) { return true; }

protected:
  int rank_ = 0, size_ = 1;
  std::string broken_; ///< why the communicator stopped working
};

/// MPI_COMM_WORLD of OpenMPI (MPI is initialized here unless the host did; it is finalized when
/// the process exits, unless a collective failed). `timeoutMs` bounds every wait.
std::unique_ptr<Communicator> openMpi(int timeoutMs, std::string& error);

/// NCCL's unique id: rank 0 makes it, every rank passes it to openNccl.
struct NcclId {
  char bytes[128];
};
class CudaDevice;

/// A new NCCL id (loads libnccl.so.2).
bool ncclUniqueId(NcclId& id, std::string& error);
/// Rank `rank` of `size` in the NCCL communicator of `id`, on `gpu` (its communication stream).
std::unique_ptr<Communicator> openNccl(CudaDevice& gpu, int rank, int size, const NcclId& id, int timeoutMs, std::string& error);

/// Tensor `id` of `p`, at `address`, as one span.
Span tensorSpan(const Program& p, int id, uint64_t address);
/// The runs of `ids` (tensors of `p`, each at address[id]) that lie back to back in memory with one
/// dtype, as spans: gaps below the program's alignment are merged when no other tensor lies in them.
std::vector<Span> contiguousSpans(const Program& p, const std::vector<int>& ids, const std::vector<uint64_t>& address);
/// Per launch of `p`: the spans its all-reduce reduces (none for other launches).
std::vector<std::vector<Span>> allReduceSpans(const Program& p, const std::vector<uint64_t>& address);

} // namespace sgc::rt
