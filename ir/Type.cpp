// Type helpers and their text form.
#include "ir/Type.h"

#include "ir/Tensor.h"

namespace sgc::ir {

Type Type::of(DType t, const std::vector<int64_t>& shape) {
  Type r{t, true, {}};
  for (int64_t d : shape) r.dims.push_back(Dim::of(d));
  return r;
}

bool Type::isStatic() const {
  if (!ranked) return false;
  for (const Dim& d : dims)
    if (!d.isStatic()) return false;
  return true;
}

std::vector<int64_t> Type::shape() const {
  std::vector<int64_t> s;
  for (const Dim& d : dims) s.push_back(d.value);
  return s;
}

std::optional<int64_t> Type::staticNumel() const {
  if (!isStatic()) return std::nullopt;
  return checkedNumel(shape());
}

std::string toString(const Dim& d) {
  if (d.isStatic()) return std::to_string(d.value);
  if (d.isSymbolic()) return d.symbol;
  return "?";
}

std::string toString(const Type& t) {
  std::string s(dtypeName(t.dtype));
  if (!t.ranked) return s + "[*]";
  s += "[";
  for (size_t i = 0; i < t.dims.size(); ++i) s += (i ? ", " : "") + toString(t.dims[i]);
  return s + "]";
}

} // namespace sgc::ir
