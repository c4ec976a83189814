// The DType facts, generated from DTypes.def.
#include "ir/DType.h"

#include <iterator>

namespace sgc::ir {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  size_t bytes;
  int32_t onnx;
  std::string_view safetensors;
  char kind;
};
constexpr DTypeInfo kInfos[] = {
#define DTYPE(E, N, B, O, S, K) {DType::E, N, B, O, S, #K[0]},
#include "ir/DTypes.def"
};
constexpr bool inEnumOrder() {
  for (size_t i = 0; i < std::size(kInfos); ++i)
    if ((size_t)kInfos[i].type != i + 1) return false;
  return true;
}
static_assert(inEnumOrder(), "info() indexes kInfos by the enum");
/// The facts of `t`: kInfos lists the types in their enum's order, after Undefined (null).
const DTypeInfo* info(DType t) {
  size_t i = (size_t)t;
  return i >= 1 && i <= std::size(kInfos) ? &kInfos[i - 1] : nullptr;
}
} // namespace

std::string_view dtypeName(DType t) { auto* i = info(t); return i ? i->name : "?"; }
size_t dtypeSize(DType t) { auto* i = info(t); return i ? i->bytes : 0; }
bool isFloat(DType t) { auto* i = info(t); return i && i->kind == 'F'; }
bool isSignedInt(DType t) { auto* i = info(t); return i && i->kind == 'I'; }
bool isUnsignedInt(DType t) { auto* i = info(t); return i && i->kind == 'U'; }
int32_t dtypeToOnnx(DType t) { auto* i = info(t); return i ? i->onnx : 0; }
std::string_view dtypeSafetensorsName(DType t) { auto* i = info(t); return i ? i->safetensors : ""; }

std::optional<DType> dtypeFromName(std::string_view name) {
  for (const auto& i : kInfos)
    if (i.name == name) return i.type;
  return std::nullopt;
}
std::optional<DType> dtypeFromOnnx(int32_t code) {
  for (const auto& i : kInfos)
    if (i.onnx == code) return i.type;
  return std::nullopt;
}
std::optional<DType> dtypeFromSafetensors(std::string_view name) {
  for (const auto& i : kInfos)
    if (i.safetensors == name) return i.type;
  return std::nullopt;
}

} // namespace sgc::ir
