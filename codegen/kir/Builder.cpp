// The lowering helpers (see Builder.h).
#include "codegen/kir/Builder.h"

namespace sgc::kir {

std::vector<int64_t> rowMajorStrides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

int Builder::buf(const ir::Value* v, bool written) {
  auto it = ids_.find(v);
  if (it != ids_.end()) {
    k.buffers[it->second].written |= written;
    return it->second;
  }
  int id = (int)k.buffers.size();
  ids_[v] = id;
  k.buffers.push_back({v->name, v->type.dtype, v->type.staticNumel().value_or(0), written});
  return id;
}

std::vector<ExprRef> Builder::coords(ExprRef flat, const std::vector<int64_t>& shape) {
  auto st = rowMajorStrides(shape);
  std::vector<ExprRef> c;
  for (size_t d = 0; d < shape.size(); ++d) {
    ExprRef q = st[d] == 1 ? flat : binary(KOp::IDiv, flat, i(st[d]));
    c.push_back(d == 0 ? q : binary(KOp::IMod, q, i(shape[d])));
  }
  return c;
}

ExprRef Builder::offset(const std::vector<ExprRef>& coords, const std::vector<int64_t>& shape) {
  auto st = rowMajorStrides(shape);
  ExprRef off = i(0);
  for (size_t d = 0; d < coords.size(); ++d) off = add(off, st[d] == 1 ? coords[d] : mul(coords[d], i(st[d])));
  return off;
}

ExprRef gatheredIndex(Builder& b, const ir::Value* idx, ExprRef at, int64_t d) {
  ExprRef j = cast(b.ld(idx, std::move(at)), Scalar::I64);
  return Builder::clamp(select(binary(KOp::Lt, j, Builder::i(0)), Builder::add(j, Builder::i(d)), j), d);
}

ExprRef lossWeight(Builder& b, const ir::Node& n, const ir::Value* weights, int64_t C, ExprRef cls) {
  Scalar t = computeType(n.input(0)->type.dtype);
  ExprRef valid = n.has("ignore_index") ? unary(KOp::Not, binary(KOp::Eq, cls, Builder::i(n.getInt("ignore_index", 0)))) : nullptr;
  ExprRef v = weights ? b.ld(weights, Builder::clamp(cls, C)) : Builder::c(1, t);
  return valid ? select(valid, v, Builder::c(0, t)) : v;
}

ExprRef sumTree(std::vector<ExprRef> a) {
  while (a.size() > 1) {
    std::vector<ExprRef> next;
    for (size_t i = 0; i + 1 < a.size(); i += 2) next.push_back(Builder::add(a[i], a[i + 1]));
    if (a.size() % 2) next.push_back(a.back());
    a = std::move(next);
  }
  return a[0];
}

std::vector<int> locals(Builder& b, int64_t count, std::vector<StmtRef>& out, const std::function<ExprRef(int64_t)>& init) {
  std::vector<int> ids;
  for (int64_t e = 0; e < count; ++e) {
    ids.push_back(b.newLocal());
    out.push_back(let(ids.back(), init(e)));
  }
  return ids;
}

StmtRef when(Builder& b, ExprRef cond, std::vector<StmtRef> body) {
  return loopUpTo(b.newLoopVar(), 1, select(std::move(cond), Builder::i(1), Builder::i(0)), std::move(body));
}

Kernel zeroKernel(const std::string& name, const ir::Value* y) {
  Builder b(name);
  int i = b.newLoopVar();
  return b.finish(loop(i, y->type.staticNumel().value(), true, {b.st(y, loopVar(i), Builder::c(0, computeType(y->type.dtype)))}));
}

Kernel pointwise(const std::string& name, const ir::Value* out, const std::function<ExprRef(Builder&, const std::vector<ExprRef>&)>& value) {
  Builder b(name);
  int v = b.newLoopVar();
  auto c = Builder::coords(loopVar(v), out->type.shape());
  ExprRef val = value(b, c);
  return b.finish(loop(v, out->type.staticNumel().value(), true, {b.st(out, loopVar(v), val)}));
}

AxisRows::AxisRows(const std::vector<int64_t>& shape, int64_t axis) {
  for (int64_t q = 0; q < (int64_t)shape.size(); ++q) (q < axis ? outer : q == axis ? d : inner) *= shape[q];
}

ExprRef AxisRows::at(const ExprRef& row, const ExprRef& k) const {
  return (binary(KOp::IDiv, row, Builder::i(inner)) * (double)d + k) * (double)inner + binary(KOp::IMod, row, Builder::i(inner));
}

ir::InferCtx knownInputs(const ir::Node& n, size_t from, size_t placeholders) {
  ir::InferCtx ic{n, std::vector<ir::Type>(placeholders), std::vector<const ir::Tensor*>(placeholders, nullptr), {}};
  for (size_t i = from; i < n.inputs.size(); ++i) {
    const ir::Value* v = n.inputs[i];
    ic.in.push_back(v ? v->type : ir::Type{});
    ic.values.push_back(v && v->kind == ir::ValueKind::Const ? v->data.get() : nullptr);
  }
  return ic;
}

} // namespace sgc::kir
