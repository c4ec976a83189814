// The Op enum and the static facts of each op, generated from Ops.def.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace sgc::ir {

enum class Op : uint16_t {
#define OP(N, ...) N,
#include "ir/Ops.def"
};

/// The kind of computation an op does (the Class column of Ops.def, which says what each means).
enum class OpClass : uint8_t {
  Elementwise, Reduction, Row, Contraction, View, Layout, Movement, ShapeOf, Pool, Loss, Random, Attention, Cache,
  Gradient, Optimizer, Collective
};

/// Where an op comes from: the default ONNX domain, ai.onnx.preview.training, or sgc's IR only.
enum class OpDomain : uint8_t { Onnx, Training, Ir };

struct OpInfo {
  std::string_view name;
  int minInputs, maxInputs;   ///< maxInputs -1: variadic
  int minOutputs, maxOutputs; ///< maxOutputs -1: variadic
  OpClass cls;
  OpDomain domain;
  int since;                  ///< the first opset of its domain with the op in its IR form
  bool differentiable;        ///< a gradient rule exists
  bool generated;             ///< the code generator lowers it
  bool expanded;              ///< ... after a pass has rewritten it into other ops
  std::string_view notGenerated; ///< why not, when it does not; for an expanded op, when it cannot be
};

const OpInfo& opInfo(Op op);
inline std::string_view opName(Op op) { return opInfo(op).name; }
inline OpClass opClass(Op op) { return opInfo(op).cls; }
std::optional<Op> opFromName(std::string_view name);
int numOps();
std::string_view opClassName(OpClass c);
std::string_view opDomainName(OpDomain d);

} // namespace sgc::ir
