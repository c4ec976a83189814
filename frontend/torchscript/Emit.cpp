// Building IR during import (see Internal.h): a node's result types are
// inferred as it is made, and a node whose inputs are all constants is
// evaluated by the reference interpreter and becomes a constant, as torch
// itself computed sizes and masks when the module was traced.
#include "frontend/torchscript/Internal.h"

#include "ir/interp/Interpreter.h"
#include "ir/shapes/Shapes.h"

namespace sgc::ts_import {
namespace {

constexpr int64_t kFoldLimit = 1 << 22; ///< largest result (elements) folded at import

} // namespace

const ir::Tensor* Ctx::known(const ir::Value* v) { return v && v->kind == ir::ValueKind::Const ? v->data.get() : nullptr; }

ir::Value* Ctx::constant(ir::Tensor t, const std::string& base) { return graph.addConst(graph.uniqueName(base), std::move(t)); }

ir::Value* Ctx::ints(const std::vector<int64_t>& v) { return constant(ir::Tensor::fromI64(ir::DType::I64, {(int64_t)v.size()}, v), "ints"); }

ir::Value* Ctx::scalar(double v, ir::DType t) {
  return ir::isFloat(t) ? constant(ir::Tensor::fromF64(t, {}, {v}), "scalar") : constant(ir::Tensor::fromI64(t, {}, {(int64_t)v}), "scalar");
}

Expected<std::vector<ir::Value*>> Ctx::ops(ir::Op o, std::vector<ir::Value*> ins, int outputs, std::map<std::string, ir::Attr> attrs) {
  std::string name = site.empty() ? std::string(ir::opName(o)) : site + "/" + std::string(ir::opName(o));
  ir::Node* n = graph.addNode(o, std::move(ins), outputs, name);
  n->attrs = std::move(attrs);
  ir::InferCtx ic{*n, {}, {}, {}};
  bool allKnown = true;
  for (ir::Value* v : n->inputs) {
    ic.in.push_back(v ? v->type : ir::Type{});
    ic.values.push_back(known(v));
    if (v && !known(v)) allKnown = false;
  }
  ic.out.resize(n->outputs.size());
  if (Error e = ir::inferNode(ic)) return makeError(where + ": " + errorText(std::move(e)));
  for (size_t i = 0; i < n->outputs.size(); ++i) n->outputs[i]->type = ic.out[i];
  bool small = true;
  for (const auto& t : ic.out) small = small && t.isStatic() && t.staticNumel().value_or(kFoldLimit + 1) <= kFoldLimit;
  if (!allKnown || !small || ir::opClass(o) == ir::OpClass::Random) return n->outputs;
  std::vector<const ir::Tensor*> values(ic.values.begin(), ic.values.end());
  auto r = ir::evalNode(*n, values);
  if (!r) return makeError(where + ": " + errorText(r.takeError()));
  std::vector<ir::Value*> outs = n->outputs;
  for (size_t i = 0; i < outs.size(); ++i) graph.makeConst(outs[i], std::move((*r)[i]));
  return outs;
}

Expected<ir::Value*> Ctx::op(ir::Op o, std::vector<ir::Value*> ins, std::map<std::string, ir::Attr> attrs) {
  auto r = ops(o, std::move(ins), 1, std::move(attrs));
  if (!r) return r.takeError();
  return (*r)[0];
}

} // namespace sgc::ts_import
