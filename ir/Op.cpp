// The op facts table, generated from Ops.def.
#include "ir/Op.h"

namespace sgc::ir {
namespace {
constexpr bool isNone(std::string_view s) { return s == "None"; }

constexpr OpInfo kOps[] = {
#define OP(N, MinI, MaxI, MinO, MaxO, Class, Rule, Kernel, Grad, Lower, Domain, Since, ...)                        \
  {#N, MinI, MaxI, MinO, MaxO, OpClass::Class, OpDomain::Domain, Since, !isNone(#Grad), !isNone(#Lower), std::string_view(#Lower) == "Expanded", "" __VA_ARGS__},
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

std::string_view opClassName(OpClass c) {
  static constexpr std::string_view names[] = {"elementwise", "reduction", "row", "contraction", "view", "layout",
                                               "movement", "shape-of", "pool", "loss", "random", "attention", "cache",
                                               "gradient", "optimizer", "collective"};
  return names[(int)c];
}

std::string_view opDomainName(OpDomain d) {
  static constexpr std::string_view names[] = {"ai.onnx", "ai.onnx.preview.training", "sgc"};
  return names[(int)d];
}

} // namespace sgc::ir
