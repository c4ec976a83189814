// Helpers shared by the aten handlers (AtenMath.cpp, AtenShape.cpp, AtenMovement.cpp, AtenNN.cpp).
#pragma once
#include "frontend/torchscript/Internal.h"

namespace sgc::ts_import {

/// The static shape of a value (the importer keeps every shape static).
std::vector<int64_t> shapeOf(const ir::Value* v);
int64_t rankOf(const ir::Value* v);
/// A dim index in [0, rank) from torch's possibly negative one; an error names the call.
Expected<int64_t> axisOf(const Call& c, int64_t dim, int64_t rank);

/// The dtype torch's type promotion gives an op of these operands (tensors and numbers).
ir::DType promote(const std::vector<const Val*>& operands);
/// An operand as a tensor of dtype `t` (numbers become constants, tensors are cast).
Expected<ir::Value*> asTensor(Call& c, const Val& v, ir::DType t);
Expected<ir::Value*> castTo(Call& c, ir::Value* v, ir::DType t);
/// The dtype an argument names (a ScalarType code), or nullopt when absent or None.
Expected<std::optional<ir::DType>> dtypeArg(const Call& c, size_t i, const std::string& name);

Val tensorVal(ir::Value* v);
/// A handler's tensor result (or its error).
inline Expected<Val> wrap(Expected<ir::Value*> v) {
  if (!v) return v.takeError();
  return tensorVal(*v);
}

// Handlers, one per aten op (their names are Aten.def's rows).
#define ATEN(name, fn) Expected<Val> fn(Call& c);
#include "frontend/torchscript/Aten.def"

} // namespace sgc::ts_import
