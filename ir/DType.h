// Element types: the enum generated from DTypes.def and the facts about each
// (name in the IR text, byte size, ONNX and safetensors codes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace sgc::ir {

enum class DType : uint8_t {
  Undefined,
#define DTYPE(E, ...) E,
#include "ir/DTypes.def"
};

std::string_view dtypeName(DType t);          ///< "f32"; "?" for Undefined
size_t dtypeSize(DType t);                     ///< bytes per element; 0 for Undefined
bool isFloat(DType t);
bool isSignedInt(DType t);
bool isUnsignedInt(DType t);
inline bool isInteger(DType t) { return isSignedInt(t) || isUnsignedInt(t); }
std::optional<DType> dtypeFromName(std::string_view name);
std::optional<DType> dtypeFromOnnx(int32_t code);
int32_t dtypeToOnnx(DType t);
std::optional<DType> dtypeFromSafetensors(std::string_view name);
std::string_view dtypeSafetensorsName(DType t);

} // namespace sgc::ir
