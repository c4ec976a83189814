// Element access for every dtype through double / int64.
#include "ir/Tensor.h"

#include "ir/Float.h"

#include <cassert>
#include <cstring>

namespace sgc::ir {

std::optional<int64_t> checkedNumel(const std::vector<int64_t>& shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > limit / d) return std::nullopt;
    n *= d;
  }
  return n;
}

Tensor::Tensor(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
  bytes.assign((size_t)numel() * dtypeSize(t), 0);
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
template <typename T> T load(const std::vector<uint8_t>& b, int64_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T> void store(std::vector<uint8_t>& b, int64_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}
} // namespace

double Tensor::getF(int64_t i) const {
  switch (dtype) {
  case DType::F64: return load<double>(bytes, i);
  case DType::F32: return load<float>(bytes, i);
  case DType::F16: return fromF16(load<uint16_t>(bytes, i));
  case DType::BF16: return fromBF16(load<uint16_t>(bytes, i));
  case DType::F8E4M3FN: return fromF8E4M3FN(load<uint8_t>(bytes, i));
  case DType::F8E5M2: return fromF8E5M2(load<uint8_t>(bytes, i));
  case DType::U64: return (double)load<uint64_t>(bytes, i);
  default: return (double)getI(i);
  }
}

int64_t Tensor::getI(int64_t i) const {
  switch (dtype) {
  case DType::I64: return load<int64_t>(bytes, i);
  case DType::I32: return load<int32_t>(bytes, i);
  case DType::I16: return load<int16_t>(bytes, i);
  case DType::I8: return load<int8_t>(bytes, i);
  case DType::U64: return (int64_t)load<uint64_t>(bytes, i);
  case DType::U32: return load<uint32_t>(bytes, i);
  case DType::U16: return load<uint16_t>(bytes, i);
  case DType::U8: return load<uint8_t>(bytes, i);
  case DType::Bool: return load<uint8_t>(bytes, i) != 0;
  default: return (int64_t)getF(i);
  }
}

void Tensor::setF(int64_t i, double v) {
  switch (dtype) {
  case DType::F64: return store<double>(bytes, i, v);
  case DType::F32: return store<float>(bytes, i, (float)v);
  case DType::F16: return store<uint16_t>(bytes, i, toF16(v));
  case DType::BF16: return store<uint16_t>(bytes, i, toBF16(v));
  case DType::F8E4M3FN: return store<uint8_t>(bytes, i, toF8E4M3FN(v));
  case DType::F8E5M2: return store<uint8_t>(bytes, i, toF8E5M2(v));
  case DType::Bool: return store<uint8_t>(bytes, i, v != 0);
  default: return setI(i, (int64_t)v);
  }
}

void Tensor::setI(int64_t i, int64_t v) {
  switch (dtype) {
  case DType::I64: return store<int64_t>(bytes, i, v);
  case DType::I32: return store<int32_t>(bytes, i, (int32_t)v);
  case DType::I16: return store<int16_t>(bytes, i, (int16_t)v);
  case DType::I8: return store<int8_t>(bytes, i, (int8_t)v);
  case DType::U64: return store<uint64_t>(bytes, i, (uint64_t)v);
  case DType::U32: return store<uint32_t>(bytes, i, (uint32_t)v);
  case DType::U16: return store<uint16_t>(bytes, i, (uint16_t)v);
  case DType::U8: return store<uint8_t>(bytes, i, (uint8_t)v);
  case DType::Bool: return store<uint8_t>(bytes, i, v != 0);
  default: return setF(i, (double)v);
  }
}

std::vector<double> Tensor::toF64() const {
  std::vector<double> v((size_t)numel());
  for (int64_t i = 0; i < (int64_t)v.size(); ++i) v[i] = getF(i);
  return v;
}

std::vector<int64_t> Tensor::toI64() const {
  std::vector<int64_t> v((size_t)numel());
  for (int64_t i = 0; i < (int64_t)v.size(); ++i) v[i] = getI(i);
  return v;
}

Tensor Tensor::fromF64(DType t, std::vector<int64_t> shape, const std::vector<double>& v) {
  Tensor r(t, std::move(shape));
  assert((int64_t)v.size() == r.numel() && "value count must match the shape");
  for (int64_t i = 0; i < (int64_t)v.size(); ++i) r.setF(i, v[i]);
  return r;
}

Tensor Tensor::fromI64(DType t, std::vector<int64_t> shape, const std::vector<int64_t>& v) {
  Tensor r(t, std::move(shape));
  assert((int64_t)v.size() == r.numel() && "value count must match the shape");
  for (int64_t i = 0; i < (int64_t)v.size(); ++i) r.setI(i, v[i]);
  return r;
}

} // namespace sgc::ir
