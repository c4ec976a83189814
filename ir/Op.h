// The Op enum and the static facts of each op, generated from Ops.def.
#pragma once
#include <optional>
#include <string_view>

namespace sgc::ir {

enum class Op : uint16_t {
#define OP(N, ...) N,
#include "ir/Ops.def"
};

struct OpInfo {
  std::string_view name;
  int minInputs, maxInputs;   ///< maxInputs -1: variadic
  int minOutputs, maxOutputs; ///< maxOutputs -1: variadic
};

const OpInfo& opInfo(Op op);
inline std::string_view opName(Op op) { return opInfo(op).name; }
std::optional<Op> opFromName(std::string_view name);
int numOps();

} // namespace sgc::ir
