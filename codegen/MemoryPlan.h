// The static memory plan of a training step: every tensor gets a region and
// a byte offset in that region before the step runs, so a step allocates
// nothing. Regions:
//   inputs       the host's data for one step (and sgc.lr)
//   params       parameters (updated in place by the optimizer)
//   state        optimizer moments, the step counter (updated in place)
//   consts       constants
//   grads        parameter gradients, one slot each (kept apart for the
//                gradient communication the data-parallel issue adds)
//   activations  every other result, placed by liveness over the schedule:
//                tensors whose lifetimes do not overlap share bytes.
// An elementwise result (or a cross-entropy gradient, over its scores) may
// reuse the buffer of an input that dies at that node (same dtype and byte
// size), and an optimizer update (or a paged-cache write) writes into the
// parameter or state it updates. Other updates (the step counter, running
// statistics) get their own buffer, copied after the step, so a forward-only
// step changes nothing.
//
// Requires: static shapes (bind-dims), nodes in schedule order.
#pragma once
#include "ir/Error.h"
#include "ir/Graph.h"

#include <string>
#include <map>
#include <set>
#include <vector>

namespace sgc::codegen {

enum class Region : uint8_t { Inputs, Params, State, Consts, Grads, Activations };
constexpr int kNumRegions = 6;
const char* regionName(Region r);

struct Buffer {
  const ir::Value* value;
  Region region;
  int64_t offset = 0, bytes = 0;
  int first = 0, last = 0;             ///< live over schedule positions [first, last]
  const ir::Value* aliasOf = nullptr;  ///< shares the bytes of this value's buffer
};

struct MemoryPlan {
  int64_t alignment = 64;
  std::vector<Buffer> buffers;         ///< one per value, in graph order
  int64_t regionBytes[kNumRegions] = {};
  int64_t activationsUnshared = 0;     ///< what activations would take without reuse
  int numSteps = 0;                    ///< schedule length (nodes)
};

/// Nodes whose result is their input's bytes seen with another shape
/// (reshapes, identities, a SumTo to the input's own shape, a transpose that
/// moves only dims of size 1): the plan gives a
/// view of an activation its input's bytes (nothing runs for it).
bool isView(const ir::Node& n);

/// Plans `g`. `schedule` groups the nodes into the kernels that run them, in
/// order (empty: one node per step); a value is live from the step that
/// writes it to the last step that reads it, or to its position in
/// `laterReads` (a GPU GEMM reading the source of a transpose it absorbs).
/// Values in `unstored` (kept in registers inside a kernel) get no bytes.
/// A value in `earlierWrites` is written at that position as well as by its
/// node (a GPU library computing it with an earlier product): it is live from
/// there, and takes no operand's bytes.
/// Errors name a value whose shape is not static.
Expected<MemoryPlan> planMemory(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule = {},
                                int64_t alignment = 64, const std::map<const ir::Value*, int>& laterReads = {},
                                const std::set<const ir::Value*>& unstored = {},
                                const std::map<const ir::Value*, int>& earlierWrites = {});

/// Proves the plan sound: inside each region, no two buffers that are live at
/// the same time overlap (aliases share by design), every buffer fits.
Error checkPlan(const MemoryPlan& p);

/// Proves that every value with bytes is live wherever `schedule` (the one planned
/// over) writes or reads it: from the step of its kernel to that of its last reader.
Error checkLiveness(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule, const MemoryPlan& p);

/// The plan as text: one line per region, one per buffer (`--emit=plan`).
std::string printPlan(const ir::Graph& g, const MemoryPlan& p);

} // namespace sgc::codegen
