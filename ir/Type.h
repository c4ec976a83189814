// Tensor types: a dtype and a shape whose dims are static sizes, named
// symbolic sizes (from ONNX dim_param; constrained later) or unknown.
#pragma once
#include "ir/DType.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sgc::ir {

struct Dim {
  int64_t value = -1; ///< >= 0 for a static dim
  std::string symbol; ///< non-empty for a symbolic dim

  static Dim of(int64_t v) { return Dim{v, {}}; }
  static Dim sym(std::string s) { return Dim{-1, std::move(s)}; }
  static Dim unknown() { return Dim{}; }
  bool isStatic() const { return value >= 0; }
  bool isSymbolic() const { return !symbol.empty(); }
  bool operator==(const Dim&) const = default;
};

struct Type {
  DType dtype = DType::Undefined;
  bool ranked = false; ///< false: nothing known of the shape
  std::vector<Dim> dims;

  static Type of(DType t, const std::vector<int64_t>& shape);
  static Type unranked(DType t) { return Type{t, false, {}}; }
  static Type ranked_(DType t, std::vector<Dim> dims) { return Type{t, true, std::move(dims)}; }
  int64_t rank() const { return (int64_t)dims.size(); }
  bool isStatic() const;
  /// The static shape; only valid when isStatic().
  std::vector<int64_t> shape() const;
  std::optional<int64_t> staticNumel() const;
  bool operator==(const Type&) const = default;
};

std::string toString(const Dim& d);
std::string toString(const Type& t); ///< "f32[N, 4]", "f32[*]" when unranked

} // namespace sgc::ir
