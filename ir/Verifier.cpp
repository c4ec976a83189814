// The verifier and structural graph equality.
#include "ir/Verifier.h"

#include <set>

namespace sgc::ir {
namespace {

Error checkData(const Value* v) {
  const char* kind = v->kind == ValueKind::Param ? "parameter" : v->kind == ValueKind::State ? "state" : "constant";
  if (!v->data) return makeError(std::string(kind) + " %" + v->name + " has no data");
  const Tensor& t = *v->data;
  auto n = checkedNumel(t.shape);
  if (!n || t.bytes.size() != (size_t)*n * dtypeSize(t.dtype))
    return makeError(std::string(kind) + " %" + v->name + ": data size does not match " + toString(v->type));
  if (!(v->type == Type::of(t.dtype, t.shape)))
    return makeError(std::string(kind) + " %" + v->name + ": type " + toString(v->type) + " differs from its data");
  if (v->kind == ValueKind::Param && !isFloat(t.dtype))
    return makeError("parameter %" + v->name + " is " + std::string(dtypeName(t.dtype)) + ", expected a floating-point type");
  return Error::success();
}

Error checkArity(const Node& n) {
  const OpInfo& info = opInfo(n.op);
  int ni = (int)n.inputs.size(), no = (int)n.outputs.size();
  if (ni < info.minInputs || (info.maxInputs >= 0 && ni > info.maxInputs))
    return makeError(describe(n) + ": " + std::to_string(ni) + " inputs, expected " + std::to_string(info.minInputs) +
                     (info.maxInputs < 0 ? " or more" : " to " + std::to_string(info.maxInputs)));
  if (no < info.minOutputs || (info.maxOutputs >= 0 && no > info.maxOutputs))
    return makeError(describe(n) + ": " + std::to_string(no) + " outputs, expected " + std::to_string(info.minOutputs) +
                     (info.maxOutputs < 0 ? " or more" : " to " + std::to_string(info.maxOutputs)));
  for (int i = 0; i < std::min(ni, info.minInputs); ++i)
    if (!n.inputs[i]) return makeError(describe(n) + ": required input " + std::to_string(i) + " is absent");
  return Error::success();
}

} // namespace

Error verify(const Graph& g, bool requireTypes) {
  std::set<const Value*> defined;
  std::set<std::string> names;
  auto define = [&](const Value* v, const std::string& where) -> Error {
    if (!names.insert(v->name).second) return makeError("value %" + v->name + " is defined twice (" + where + ")");
    defined.insert(v);
    if (requireTypes && (v->type.dtype == DType::Undefined || !v->type.ranked))
      return makeError("value %" + v->name + " has no inferred type (" + where + ")");
    return Error::success();
  };
  for (const Value* v : g.inputs)
    if (Error e = define(v, "input")) return e;
  for (const auto* list : {&g.params, &g.state, &g.consts})
    for (const Value* v : *list) {
      if (Error e = define(v, "initializer")) return e;
      if (Error e = checkData(v)) return e;
    }
  for (const auto& n : g.nodes()) {
    if (Error e = checkArity(*n)) return e;
    for (const Value* in : n->inputs)
      if (in && !defined.count(in))
        return makeError(describe(*n) + ": input %" + in->name + " is not defined before it is used");
    for (const Value* out : n->outputs) {
      if (!out) continue;
      if (out->producer != n.get()) return makeError(describe(*n) + ": result %" + out->name + " names another producer");
      if (Error e = define(out, describe(*n))) return e;
    }
  }
  for (const Value* v : g.outputs)
    if (!v || !defined.count(v)) return makeError("graph output %" + (v ? v->name : std::string("_")) + " is not defined");
  for (const auto& n : g.nodes()) // a cast whose result lives in state that keeps it (pass shadow-weights)
    if (n->has("shadow")) {
      const Value* copy = g.findValue(n->getString("shadow", ""));
      bool typed = n->outputs[0]->type.dtype != DType::Undefined; // not before infer-shapes
      if (n->op != Op::Cast || !copy || copy->kind != ValueKind::State || (typed && !(copy->type == n->outputs[0]->type)))
        return makeError(describe(*n) + ": attribute shadow names no state of its result's type");
    }
  std::set<const Value*> updated;
  for (auto& [v, next] : g.updates) {
    if (!v || !next || !defined.count(v) || !defined.count(next)) return makeError("an update names an undefined value");
    if (v->kind != ValueKind::Param && v->kind != ValueKind::State)
      return makeError("update of %" + v->name + ": only parameters and state are updated");
    if (!updated.insert(v).second) return makeError("%" + v->name + " is updated twice");
    bool typed = next->type.dtype != DType::Undefined; // not before infer-shapes
    if (typed && (next->type.dtype != v->type.dtype || (next->type.isStatic() && next->type.shape() != v->type.shape())))
      return makeError("update of %" + v->name + " : " + toString(v->type) + " with %" + next->name + " : " + toString(next->type));
  }
  return Error::success();
}

bool equal(const Graph& a, const Graph& b, std::string* why) {
  auto differ = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  auto sameValue = [](const Value* x, const Value* y) {
    if (!x || !y) return x == y;
    if (x->name != y->name || !(x->type == y->type) || x->kind != y->kind) return false;
    return !x->data || (y->data && *x->data == *y->data);
  };
  auto sameList = [&](const std::vector<Value*>& x, const std::vector<Value*>& y) {
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!sameValue(x[i], y[i])) return false;
    return true;
  };
  if (a.name != b.name) return differ("graph names differ");
  if (!sameList(a.inputs, b.inputs)) return differ("inputs differ");
  if (!sameList(a.params, b.params)) return differ("parameters differ");
  if (!sameList(a.state, b.state)) return differ("state differs");
  if (!sameList(a.consts, b.consts)) return differ("constants differ");
  if (a.updates.size() != b.updates.size()) return differ("update counts differ");
  for (size_t i = 0; i < a.updates.size(); ++i)
    if (!sameValue(a.updates[i].first, b.updates[i].first) || !sameValue(a.updates[i].second, b.updates[i].second))
      return differ("update " + std::to_string(i) + " differs");
  if (!sameList(a.outputs, b.outputs)) return differ("outputs differ");
  if (a.nodes().size() != b.nodes().size()) return differ("node counts differ");
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node &x = *a.nodes()[i], &y = *b.nodes()[i];
    if (x.op != y.op || x.name != y.name || !(x.attrs == y.attrs) || !sameList(x.inputs, y.inputs) ||
        !sameList(x.outputs, y.outputs))
      return differ("node " + std::to_string(i) + " differs: " + describe(x) + " vs " + describe(y));
  }
  return true;
}

} // namespace sgc::ir
