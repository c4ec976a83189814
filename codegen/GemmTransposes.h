// Transposes a GPU need not run: a Transpose that swaps the last two dims of
// a value and is read only as an operand of matrix products that cuBLASLt
// runs becomes those GEMMs' transpose flag, reading the value it transposes.
// That value must keep its bytes until the last such GEMM: the memory plan
// keeps a result live through it (`lastRead`); a parameter or state must not
// be updated in place before it. The CPU still runs the transposes (its
// product kernels read them). Decided before the memory plan.
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
  std::map<const ir::Value*, int> lastRead;             ///< those values -> the last GEMM's schedule position
};

AbsorbedTransposes absorbTransposes(const ir::Graph& g, const std::vector<std::vector<const ir::Node*>>& schedule);

} // namespace sgc::codegen
