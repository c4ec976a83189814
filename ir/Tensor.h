// A dense host tensor with a static shape: constants, parameters and the
// values the reference interpreter computes. Elements are read and written
// as double (floating point) or int64 (integers, bool) whatever the dtype.
#pragma once
#include "ir/DType.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace sgc::ir {

/// Element count of a shape, or nullopt when a dim is negative or the count
/// overflows `limit`.
std::optional<int64_t> checkedNumel(const std::vector<int64_t>& shape, int64_t limit = INT64_MAX);

class Tensor {
public:
  Tensor() = default;
  /// A zero-filled tensor. The shape must be valid (checked by the caller).
  Tensor(DType dtype, std::vector<int64_t> shape);

  DType dtype = DType::Undefined;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const;
  int64_t rank() const { return (int64_t)shape.size(); }

  double getF(int64_t i) const;
  int64_t getI(int64_t i) const;
  void setF(int64_t i, double v);
  void setI(int64_t i, int64_t v);

  std::vector<double> toF64() const;
  std::vector<int64_t> toI64() const;
  static Tensor fromF64(DType t, std::vector<int64_t> shape, const std::vector<double>& v);
  static Tensor fromI64(DType t, std::vector<int64_t> shape, const std::vector<int64_t>& v);
  static Tensor scalarI64(int64_t v) { return fromI64(DType::I64, {}, {v}); }

  bool operator==(const Tensor& o) const = default;
};

} // namespace sgc::ir
