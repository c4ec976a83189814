// Transposes a GPU need not run: a Transpose that swaps the last two dims of
// a value and is read only as an operand of matrix products that cuBLASLt
// runs becomes those GEMMs' transpose flag, reading the value it transposes.
// That value must keep its bytes until the last such GEMM: a result still
// live there in the memory plan, or a parameter or state not updated in
// place before it, or an input or constant. The CPU still runs the
// transposes (its product kernels read them).
#pragma once
#include "codegen/MemoryPlan.h"
#include "ir/Graph.h"

#include <map>
#include <set>
#include <vector>

namespace sgc::codegen {

struct AbsorbedTransposes {
  std::set<const ir::Node*> skipped;                    ///< Transpose nodes whose kernels a GPU skips
  std::map<const ir::Value*, const ir::Value*> source;  ///< their results -> the values they transpose
};

AbsorbedTransposes absorbTransposes(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule, const MemoryPlan& plan);

} // namespace sgc::codegen
