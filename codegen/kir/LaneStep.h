// How an index moves across the consecutive iterations one GPU thread runs.
//
// A GPU thread runs `width` consecutive iterations of an elementwise loop
// (vectorWidthFor) so that neighbouring elements' loads and stores merge into
// 16-byte accesses. LLVM merges two accesses only when it sees their indices
// differ by a constant; an index computed through a transpose or a reshape
// (divisions and remainders of the iteration) hides that. laneStep finds, from
// the index expression itself, that iteration base + u (base a multiple of
// width, u < width) reads element index(base) + step * u; the emitter then
// computes lanes 1.. as that sum, and the accesses merge.
#pragma once
#include "codegen/kir/Kernel.h"

#include <unordered_map>

namespace sgc::kir {

struct LaneStep {
  bool affine = false;      ///< index(base + u) = index(base) + step * u for every u < width
  int64_t step = 0;         ///< elements a lane moves the index
  int64_t divisor = 1;      ///< a known divisor of index(base) (0: index(base) is 0)
  bool nonNegative = false; ///< index(base + u) >= 0 for every u
};

/// Whether Within(x, n) (x stepping as `x`) steps as x across the lanes when the emitter computes
/// lane u's as clamp(x(base), 0, n - step * width) + step * u: x where the lanes are in range
/// (x(base) and n multiples of step * width, so either all lanes are or none), and an index in
/// range that steps as x where they are not, which Within allows.
bool stepsWithin(const LaneStep& x, int64_t n, int width);

/// The steps of i64 expressions across iterations base + u of parallel loop `loop`, u < `width`
/// (not affine where an expression moves with u in another way: a clamp, a select, a gather),
/// remembered for every node seen: an expression is a DAG, and a loop's indices share nodes.
class LaneSteps {
public:
  LaneSteps(int loop, int width) : loop_(loop), width_(width) {}
  LaneStep of(const Expr& e);
  int width() const { return width_; }

private:
  bool dependsOn(const Expr& e);
  LaneStep compute(const Expr& e);

  int loop_, width_;
  std::unordered_map<const Expr*, bool> moves_;
  std::unordered_map<const Expr*, LaneStep> steps_;
};

/// LaneSteps(loop, width).of(e), for one expression.
LaneStep laneStep(const Expr& e, int loop, int width);

} // namespace sgc::kir
