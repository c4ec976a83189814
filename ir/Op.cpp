// The op facts table, generated from Ops.def.
#include "ir/Op.h"

#include <cstdint>

namespace sgc::ir {
namespace {
constexpr OpInfo kOps[] = {
#define OP(N, MinI, MaxI, MinO, MaxO, ...) {#N, MinI, MaxI, MinO, MaxO},
#include "ir/Ops.def"
};
} // namespace

const OpInfo& opInfo(Op op) { return kOps[(int)op]; }
int numOps() { return (int)(sizeof(kOps) / sizeof(kOps[0])); }

std::optional<Op> opFromName(std::string_view name) {
  for (int i = 0; i < numOps(); ++i)
    if (kOps[i].name == name) return (Op)i;
  return std::nullopt;
}

} // namespace sgc::ir
